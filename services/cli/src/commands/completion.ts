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
 * A bash completion function for the command tree: the words before the cursor pick the
 * subcommands and options to offer. It serves `trainyard` and `npx trainyard` (unless npx has a
 * completion of its own). zsh loads the same function through `bashcompinit`.
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
  local cur path w i subs opts first=1
  cur="\${COMP_WORDS[COMP_CWORD]}"
  path=""
  if [[ "\${COMP_WORDS[0]}" == npx ]]; then
    if ((COMP_CWORD == 1)); then
      COMPREPLY=($(compgen -W "${name}" -- "$cur"))
      return
    fi
    [[ "\${COMP_WORDS[1]}" == ${name} ]] || { COMPREPLY=($(compgen -f -- "$cur")); return; }
    first=2
  fi
  for ((i = first; i < COMP_CWORD; i++)); do
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
complete -p npx >/dev/null 2>&1 || complete -o default -F ${fn} npx
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
