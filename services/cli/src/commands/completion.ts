import type { Command } from 'commander';
import { CliError } from '../client.ts';

interface Node {
  /** The words that lead here, space-separated ('' for the top). */
  path: string;
  subcommands: string[];
  options: string[];
}

function walk(cmd: Command, path: string, globals: string[], out: Node[]): void {
  const options = cmd.options.flatMap((o) => [o.long, o.short]).filter((f): f is string => !!f);
  const subs = cmd.commands.filter((c) => !(c as unknown as { _hidden?: boolean })._hidden);
  out.push({
    path,
    subcommands: subs.map((c) => c.name()),
    options: [...new Set([...options, ...globals, '--help'])],
  });
  for (const c of subs) walk(c, path ? `${path} ${c.name()}` : c.name(), globals, out);
}

const quote = (words: string[]) => words.join(' ').replace(/[^A-Za-z0-9 _.:-]/g, '');

/**
 * A bash completion function for the command tree: the word before the cursor path picks the
 * subcommands and options to offer. zsh loads the same function through `bashcompinit`.
 */
export function completionScript(program: Command, shell: 'bash' | 'zsh'): string {
  const globals = program.options.flatMap((o) => [o.long, o.short]).filter((f): f is string => !!f);
  const nodes: Node[] = [];
  walk(program, '', globals, nodes);
  const name = program.name();
  const fn = `_${name.replace(/[^A-Za-z0-9]/g, '_')}_complete`;
  const cases = nodes
    .map((n) => `    "${n.path}") subs="${quote(n.subcommands)}"; opts="${quote(n.options)}" ;;`)
    .join('\n');
  const bash = `${fn}() {
  local cur path w i subs opts
  cur="\${COMP_WORDS[COMP_CWORD]}"
  path=""
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="\${COMP_WORDS[i]}"
    [[ "$w" == -* ]] && continue
    ${fn}_node "$path"
    [[ " $subs " == *" $w "* ]] && path="\${path:+$path }$w"
  done
  ${fn}_node "$path"
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  elif [[ -n "$subs" ]]; then
    COMPREPLY=($(compgen -W "$subs" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}
${fn}_node() {
  case "$1" in
${cases}
    *) subs=""; opts="" ;;
  esac
}
complete -F ${fn} ${name}
`;
  if (shell === 'bash')
    return `# ${name} completion for bash: eval "$(${name} completion bash)"\n${bash}`;
  return `# ${name} completion for zsh: eval "$(${name} completion zsh)"\nautoload -U +X bashcompinit && bashcompinit\n${bash}`;
}

/** `trainyard completion bash|zsh`. */
export function registerCompletionCommand(program: Command): void {
  program
    .command('completion')
    .description('print shell completion: eval "$(trainyard completion bash)" (or zsh)')
    .argument('<shell>', 'bash or zsh')
    .action((shell: string) => {
      if (shell !== 'bash' && shell !== 'zsh')
        throw new CliError(`completion is written for bash and zsh, not "${shell}"`);
      process.stdout.write(completionScript(program, shell));
    });
}
