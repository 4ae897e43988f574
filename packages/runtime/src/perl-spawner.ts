/**
 * The first process of an attempt that runs as a user of its own, as root, in new PID and mount
 * namespaces: the attempt sees only its own processes (not their command lines or environment),
 * and, unless its sandbox is under one of them, /tmp and /dev/shm of its own, gone when it ends.
 * It becomes the attempt's script as the attempt's user; when that first process ends, the
 * kernel ends whatever is left in the namespace.
 */
export const ATTEMPT_INIT = [
  'if [ "$4" = 1 ]; then',
  '  mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp || exit 126',
  '  mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm || exit 126',
  'fi',
  'exec setpriv --reuid="$1" --regid="$2" --clear-groups --no-new-privs --inh-caps=-all --bounding-set=-all /bin/sh "$3"',
].join('\n');

/** The fields of a launch file (see `launchScript`), each one there, none holding a NUL. */
export const LAUNCH_FIELDS = [
  'TY_WORK',
  'TY_LOG',
  'TY_PID',
  'TY_EXIT',
  'TY_SCRIPT',
  'TY_UID',
  'TY_GID',
  'TY_PRIVATE_TMP',
  'TY_CGROUP',
] as const;

/**
 * The spawner, in Perl (perl-base is Essential on Debian): run as `perl -e PERL_SPAWNER
 * ATTEMPT_INIT`, it reads `run ID LAUNCH` and `end ID UID` lines on stdin and answers on stdout
 * (see `Spawner`). An attempt is one fork: the child enters a new session and waits for the
 * parent's word (a byte on a pipe) before it runs the script, so that nothing runs that the
 * worker was not told of, and, where the launch names a cgroup (`TY_CGROUP`, its `cgroup.procs`),
 * the parent puts the child in it before that word, so that all it starts is in there too; a
 * child it cannot put there is let go without running anything. The parent is every attempt's
 * waiter: it reaps them, records each
 * status and says it. Its commands and reports are read and written whole, with retries where
 * SIGCHLD interrupts them; SIGCHLD cuts a wait on stdin short, and the wait is bounded while
 * children run, for a SIGCHLD that comes just before it. Once stdin closes it lets go of the
 * pipe (stdin becomes /dev/null), still waits for every child, records its status and only then
 * exits. It ignores SIGINT, SIGQUIT and SIGHUP, which reach a worker's whole process group, and
 * closes every descriptor it inherited beyond stdin, stdout and stderr; its children start with
 * every signal at its default.
 */
export const PERL_SPAWNER = String.raw`
use strict;
use warnings;
use POSIX ();

my $inner = shift @ARGV;
my @fields = qw(${LAUNCH_FIELDS.join(' ')});
my $recheck_s = 0.1;
my %children;
my $exited = 0;

$0 = 'trainyard-spawner';
umask 077;
if (opendir(my $fds, '/proc/self/fd')) {
    my @inherited = grep { /\A[0-9]+\z/ && $_ > 2 } readdir $fds;
    closedir $fds;
    POSIX::close($_) for @inherited;
}
chdir '/' or die "cannot enter /: $!\n";
$SIG{$_} = 'IGNORE' for qw(PIPE INT QUIT HUP);
$SIG{CHLD} = sub { $exited = 1 };

sub report {
    my ($line) = @_;
    while (length $line) {
        my $written = syswrite STDOUT, $line;
        if (defined $written) { substr($line, 0, $written) = '' }
        elsif ($! != POSIX::EINTR()) { return }
    }
}

sub record {
    my ($file, $text) = @_;
    open(my $out, '>', $file) or return;
    print {$out} $text;
    close $out;
}

sub on_path {
    my ($name) = @_;
    return grep { m{\A/} && -f "$_/$name" && -x _ } split /:/, $ENV{PATH} // '';
}

sub read_launch {
    my ($file) = @_;
    open(my $in, '<', $file) or return;
    my $text = do { local $/; <$in> } // '';
    my %launch = map { /\A(TY_[A-Z_]+)=(.*)\z/s ? ($1 => $2) : () } split /\0/, $text;
    return () if grep { !defined $launch{$_} } @fields;
    return %launch;
}

sub detach {
    my ($out) = @_;
    $SIG{$_} = 'DEFAULT' for qw(PIPE INT QUIT HUP CHLD);
    POSIX::sigprocmask(POSIX::SIG_SETMASK(), POSIX::SigSet->new);
    open(my $null, '+<', '/dev/null') or POSIX::_exit(127);
    POSIX::dup2(fileno $null, 0);
    POSIX::dup2(fileno($out // $null), $_) for 1, 2;
}

sub run_attempt {
    my ($launch, $log, $go, $ready) = @_;
    close $ready;
    POSIX::setsid();
    detach($log);
    my $got;
    do { $got = sysread $go, my $byte, 1 } until defined $got || $! != POSIX::EINTR();
    POSIX::_exit(127) unless $got;
    my @command = length $launch->{TY_UID}
      ? ('unshare', qw(--pid --fork --mount-proc --propagation private /bin/sh -c), $inner,
         'trainyard-attempt', @{$launch}{qw(TY_UID TY_GID TY_SCRIPT TY_PRIVATE_TMP)})
      : ('/bin/sh', $launch->{TY_SCRIPT});
    exec { $command[0] } @command or print STDERR "trainyard: cannot run $command[0]: $!\n";
    POSIX::_exit(127);
}

sub join_cgroup {
    my ($procs, $pid) = @_;
    open(my $out, '>>', $procs) or return 0;
    my $written = syswrite $out, "$pid\n";
    return close($out) && defined $written;
}

sub start {
    my ($id, $file) = @_;
    my %launch = read_launch($file) or return report("failed $id cannot read the launch file\n");
    my ($log, $go, $ready, $pid);
    my $why = !chdir($launch{TY_WORK}) ? 'cannot enter the work directory'
      : !open($log, '>>', $launch{TY_LOG}) ? 'cannot open the log file'
      : length($launch{TY_UID}) && !(on_path('setpriv') && on_path('unshare'))
        ? 'setpriv and unshare (util-linux) are needed'
      : !pipe($go, $ready) || !defined($pid = fork) ? "cannot fork: $!"
      : undef;
    run_attempt(\%launch, $log, $go, $ready) if defined $pid && $pid == 0;
    chdir '/';
    if (defined $why) {
        record($launch{TY_EXIT}, "launch-error $why\n");
        return report("failed $id $why\n");
    }
    close $go;
    close $log;
    if (length $launch{TY_CGROUP} && !join_cgroup($launch{TY_CGROUP}, $pid)) {
        my $why = "cannot enter its memory cgroup: $!";
        close $ready;
        record($launch{TY_EXIT}, "launch-error $why\n");
        return report("failed $id $why\n");
    }
    record($launch{TY_PID}, "$pid\n");
    $children{$pid} = [$id, $launch{TY_EXIT}];
    report("started $id $pid\n");
    syswrite $ready, 'x';
    close $ready;
}

sub end_user {
    my ($id, $uid) = @_;
    return report("ended $id 2\n") unless $uid =~ /\A[0-9]+\z/ && $uid >= 1000;
    my $pid = fork;
    return report("ended $id 126\n") unless defined $pid;
    if ($pid == 0) {
        detach();
        exec { 'setpriv' } 'setpriv', "--reuid=$uid", "--regid=$uid",
          qw(--clear-groups --no-new-privs /bin/sh -c), 'kill -9 -1 2>/dev/null; exit 0'
          or POSIX::_exit(127);
    }
    $children{$pid} = [$id];
}

sub reap {
    my ($flags) = @_;
    while ((my $pid = waitpid(-1, $flags)) > 0) {
        my $child = delete $children{$pid} or next;
        my ($id, $exit_file) = @$child;
        my $status = $? & 127 ? 128 + ($? & 127) : $? >> 8;
        record($exit_file, "status $status\n") if defined $exit_file;
        report("ended $id $status\n");
    }
}

my $pending = '';
my $commands = '';
vec($commands, fileno STDIN, 1) = 1;
while (1) {
    $exited = 0;
    reap(POSIX::WNOHANG());
    my $wait_s = $exited ? 0 : %children ? $recheck_s : undef;
    next if select(my $readable = $commands, undef, undef, $wait_s) < 1;
    my $got = sysread STDIN, $pending, 65536, length $pending;
    next if !defined $got && $! == POSIX::EINTR();
    last unless $got;
    while ($pending =~ s/\A([^\n]*)\n//) {
        my ($kind, $id, $arg) = split / /, $1, 3;
        next unless defined $arg;
        if ($kind eq 'run') { start($id, $arg) }
        elsif ($kind eq 'end') { end_user($id, $arg) }
    }
}
open(STDIN, '<', '/dev/null');
reap(0);
`;
