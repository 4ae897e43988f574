/**
 * How a channel's process starts on the process runtime: as root, through a Perl trampoline that
 * drops to the session's user before it runs anything of the session's (see `TRAMPOLINE`).
 */
import { PERL_SYSCALLS } from './perl-syscalls.ts';

/** Where perl (perl-base, Essential on Debian and already needed by the spawner) lives. */
export const PERL = '/usr/bin/perl';

/** The prefix under which the session's environment reaches `TRAMPOLINE` (see there). */
const ENV_PREFIX = 'TRAINYARD_ENV_';

/**
 * What every channel's process starts as, as root: it closes every descriptor it inherited
 * beyond 0-2; given the session's uid and gid, it names the uid in an /etc/passwd of its own
 * mount namespace (`whoami`, a shell's prompt and OpenSSH's sftp server look it up), drops to
 * them with no other group and forbids itself new privileges; then it becomes `ARGV` with the
 * session's environment. node-pty opens terminals without close-on-exec, so without this a
 * session's process would hold the terminals of every other session on the worker; and it does
 * so as root, so that no process of the session's uid can reach into it (ptrace) before they
 * are closed. It runs no program as root: the environment arrives with every name prefixed, so
 * that nothing in it (`LD_PRELOAD`, `PERL5OPT`…) acts before the drop.
 */
const TRAMPOLINE = String.raw`
use strict;
use warnings;
use Config;
use POSIX ();
${PERL_SYSCALLS}
my ($uid, $gid, $entry) = splice(@ARGV, 0, 3);
my %env;
for my $name (keys %ENV) { $env{$1} = $ENV{$name} if $name =~ /\A${ENV_PREFIX}(.+)\z/s }
%ENV = %env;
sub fail {
  print STDERR "trainyard: $_[0]\n";
  POSIX::_exit(126);
}

opendir(my $fds, '/proc/self/fd') or fail("cannot list open descriptors: $!");
my @inherited = grep { /\A[0-9]+\z/ && $_ > 2 } readdir $fds;
closedir $fds;
POSIX::close($_) for @inherited;

sub named {
  my ($entry) = @_;
  # syscall may write to its string arguments: none of them is a literal.
  my ($none, $root, $tmp, $tmpfs, $size, $passwd) =
    ('none', '/', '/tmp', 'tmpfs', 'size=16m,mode=0700', '/etc/passwd');
  fail('a session of a uid of its own needs x86_64 or aarch64') unless %nr;
  syscall($nr{unshare}, 0x00020000) != -1 or fail("cannot unshare mounts: $!");
  # Slaves: what is mounted here stays here, and what the host mounts still shows.
  syscall($nr{mount}, $none, $root, 0, (1 << 14) | (1 << 19), 0) != -1
    or fail("cannot make mounts slaves: $!");
  open(my $in, '<', $passwd) or fail("cannot read /etc/passwd: $!");
  my $users = do { local $/; <$in> } // '';
  close $in;
  $users .= "\n" if length($users) && substr($users, -1) ne "\n";
  # The copy is written to a tmpfs of this namespace's own, over /tmp for a moment: nothing of
  # it is left on the host, and no one can fill it first.
  syscall($nr{mount}, $tmpfs, $tmp, $tmpfs, 2 | 4 | 8, $size) != -1
    or fail("cannot mount a tmpfs for /etc/passwd: $!");
  my $file = "$tmp/passwd";
  open(my $out, '>', $file) or fail("cannot write $file: $!");
  (print {$out} $users, $entry, "\n") && chmod(0644, $out) && close($out)
    or fail("cannot write $file: $!");
  syscall($nr{mount}, $file, $passwd, 0, 4096, 0) != -1
    or fail("cannot name uid $uid in /etc/passwd: $!");
  syscall($nr{umount2}, $tmp, 2) != -1 or fail("cannot unmount the tmpfs on /tmp: $!");
}

if ($uid ne '-') {
  fail("not a session's uid and gid: $uid, $gid")
    unless "$uid:$gid" =~ /\A[0-9]{4,10}:[0-9]{4,10}\z/ && $uid >= 1000 && $gid >= 1000;
  named($entry) if $entry ne '-';
  POSIX::setgid($gid) or fail("cannot take gid $gid: $!");
  $) = "$gid $gid";
  POSIX::setuid($uid) or fail("cannot take uid $uid: $!");
  fail('still privileged') unless $< == $uid && $> == $uid && $( == $gid && $) eq "$gid $gid";
  syscall($nr{prctl}, 38, 1, 0, 0, 0) != -1 or fail("cannot forbid new privileges: $!");
}
exec { $ARGV[0] } @ARGV or do {
  print STDERR "trainyard: cannot run $ARGV[0]: $!\n";
  POSIX::_exit(127);
};
`;

/** A session's uid and gid, and its line of /etc/passwd (`name:x:uid:gid:gecos:home:shell`). */
export interface SessionUser {
  uid: number;
  gid: number;
  entry: string;
}

/**
 * `argv` behind the trampoline, which drops to `user` (if given), and the environment that
 * carries the session's to it.
 */
export function trampoline(
  argv: readonly string[],
  env: Record<string, string>,
  user: SessionUser | undefined,
): { args: string[]; env: Record<string, string> } {
  const hidden = Object.fromEntries(Object.entries(env).map(([k, v]) => [ENV_PREFIX + k, v]));
  const ids = user ? [String(user.uid), String(user.gid), user.entry] : ['-', '-', '-'];
  return { args: ['-e', TRAMPOLINE, '--', ...ids, ...argv], env: hidden };
}
