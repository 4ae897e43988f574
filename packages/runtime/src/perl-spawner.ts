import { PERL_SYSCALLS } from './perl-syscalls.ts';

/**
 * The ids a job may run as: none of the system's accounts, and below 2^32 - 1, which the kernel
 * reads as "leave it as it is" (larger ones it cuts to 32 bits, root's 0 among them).
 */
export const JOB_IDS = { first: 1000, last: 4_294_967_294 } as const;

/** Why an attempt is refused the ids it was given. */
export const NOT_JOB_IDS = `the job's uid and gid must be from ${JOB_IDS.first} to ${JOB_IDS.last}`;

/** Whether `id` is one a job may run as (see `JOB_IDS`). */
export const isJobId = (id: number): boolean =>
  Number.isInteger(id) && id >= JOB_IDS.first && id <= JOB_IDS.last;

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
 * The spawner, in Perl (perl-base is Essential on Debian): run as `perl -e PERL_SPAWNER`, it
 * reads `run ID LAUNCH` and `end ID UID` lines on stdin and answers on stdout (see `Spawner`).
 * An attempt is one fork: the child enters a new session and waits for the parent's word (a byte
 * on a pipe) before it runs the script, so that nothing runs that the worker was not told of,
 * and, where the launch names a cgroup (`TY_CGROUP`, its `cgroup.procs`), the parent puts the
 * child in it before that word, so that all it starts is in there too; a child it cannot put
 * there is let go without running anything.
 *
 * An attempt of a user of its own (`TY_UID`) runs as the first process of new PID, mount and IPC
 * namespaces (`confined`): it sees only its own processes (and System V IPC objects and POSIX
 * message queues, gone with it rather than left to the uid's next holder), has a /proc of its
 * own and, unless its sandbox lies under them, a /tmp and /dev/shm of its own, gone when it
 * ends; it takes the attempt's uid and gid with no other group, no capability and no way to gain
 * privileges. The child waits for it and ends as it ended; when it ends, the kernel ends
 * whatever is left in the namespace. A stop (INT, TERM, HUP) is sent to the child, which passes
 * it on to the script once the script has a handler for it (it reads the script's caught signals
 * from /proc, for up to 10 s): a namespace's first process drops a signal it has no handler for.
 * All of that is system calls made by the child (their numbers for x86_64 and aarch64), not
 * programs: an attempt starts no program before its script. A step that fails ends the attempt
 * with status 126 and its reason in the log and in the end's file, which the parent then keeps:
 * the attempt reads as a launch error, not as the job's own exit.
 *
 * The parent is every attempt's waiter: it reaps them, records each status and says it. Its
 * commands and reports are read and written whole, with retries where SIGCHLD interrupts them;
 * SIGCHLD cuts a wait on stdin short, and the wait is bounded while children run, for a SIGCHLD
 * that comes just before it. Once stdin closes it lets go of the pipe (stdin becomes /dev/null),
 * still waits for every child, records its status and only then exits. It ignores SIGINT, SIGQUIT
 * and SIGHUP, which reach a worker's whole process group, and closes every descriptor it inherited
 * beyond stdin, stdout and stderr; its children start with every signal at its default.
 */
export const PERL_SPAWNER = String.raw`
use strict;
use warnings;
use Config;
use POSIX ();

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

sub job_id {
    my ($id) = @_;
    return $id =~ /\A[1-9][0-9]{3,9}\z/ && $id >= ${JOB_IDS.first} && $id <= ${JOB_IDS.last};
}

${PERL_SYSCALLS}
my ($ms_nosuid, $ms_nodev, $ms_noexec, $ms_rec, $ms_private) = (2, 4, 8, 1 << 14, 1 << 18);
my ($pr_set_pdeathsig, $pr_capbset_drop, $pr_set_no_new_privs) = (1, 24, 38);

my $launch_errors;
my ($pass_on_every_s, $pass_on_tries) = (0.005, 2000);

sub unconfined {
    my ($what) = @_;
    my $why = "cannot confine the job ($what)";
    print STDERR "trainyard: $why\n";
    syswrite $launch_errors, "launch-error $why\n" if $launch_errors;
    POSIX::_exit(126);
}

sub confine {
    my ($what, $call, @args) = @_;
    syscall($nr{$call}, @args) != -1 or unconfined("$what: $!");
}

sub caught {
    my ($in, $signal) = @_;
    seek($in, 0, 0) or return undef;
    my $status = do { local $/; <$in> } // '';
    return undef if $status =~ /^State:\s+[ZX]/m;
    my ($mask) = $status =~ /^SigCgt:\s+([0-9a-f]+)$/m or return undef;
    my $number = POSIX->can("SIG$signal")->();
    return (hex(substr($mask, -8)) >> ($number - 1)) & 1;
}

sub pass_on {
    my ($init, $status, $signal) = @_;
    return unless $status;
    for (1 .. $pass_on_tries) {
        my $now = caught($status, $signal);
        return unless defined $now;
        return kill($signal, $init) if $now;
        select(undef, undef, undef, $pass_on_every_s);
    }
}

sub confined {
    my ($launch) = @_;
    my ($uid, $gid) = map { 0 + $_ } @{$launch}{qw(TY_UID TY_GID)};
    open($launch_errors, '>>', $launch->{TY_EXIT}) or unconfined("its end's file: $!");
    confine('namespaces', unshare => 0x20000000 | 0x08000000 | 0x00020000);
    my $stops = POSIX::SigSet->new(POSIX::SIGINT(), POSIX::SIGTERM(), POSIX::SIGHUP());
    POSIX::sigprocmask(POSIX::SIG_BLOCK(), $stops);
    my $init = fork;
    unconfined("fork: $!") unless defined $init;
    if ($init) {
        $0 = 'trainyard-attempt';
        # This process shares the mount namespace in which init mounts the new PID namespace's
        # /proc, where init is 1: its status is read by whichever name it has when opened.
        my $status;
        open($status, '<', "/proc/$init/status") or open($status, '<', '/proc/1/status')
          or undef $status;
        for my $signal (qw(INT TERM HUP)) {
            # Without SA_RESTART, so that the signal cuts the wait short and the handler runs.
            my $action = POSIX::SigAction->new(sub { pass_on($init, $status, $signal) }, undef, 0);
            $action->safe(1);
            POSIX::sigaction(POSIX->can("SIG$signal")->(), $action);
        }
        POSIX::sigprocmask(POSIX::SIG_UNBLOCK(), $stops);
        waitpid $init, 0;
        POSIX::_exit($? & 127 ? 128 + ($? & 127) : $? >> 8);
    }
    POSIX::sigprocmask(POSIX::SIG_UNBLOCK(), $stops);
    confine('/', mount => 'none', '/', 0, $ms_rec | $ms_private, 0);
    confine('/proc', mount => 'proc', '/proc', 'proc', $ms_nosuid | $ms_nodev | $ms_noexec, 0);
    if ($launch->{TY_PRIVATE_TMP} eq '1') {
        confine($_, mount => 'tmpfs', $_, 'tmpfs', $ms_nosuid | $ms_nodev, 'mode=1777')
          for '/tmp', '/dev/shm';
    }
    my $cap = 0;
    $cap++ while syscall($nr{prctl}, $pr_capbset_drop, $cap, 0, 0, 0) != -1;
    unconfined("capabilities: $!") unless $! == POSIX::EINVAL() && $cap > 0;
    confine('groups', setgroups => 0, 0);
    confine('gid', setresgid => $gid, $gid, $gid);
    confine('uid', setresuid => $uid, $uid, $uid);
    unconfined("its ids are not $uid:$gid")
      unless POSIX::getuid() == $uid && POSIX::geteuid() == $uid
        && POSIX::getgid() == $gid && POSIX::getegid() == $gid;
    confine('its parent', prctl => $pr_set_pdeathsig, 9, 0, 0, 0);
    confine('privileges', prctl => $pr_set_no_new_privs, 1, 0, 0, 0);
    confine('capabilities', capset => pack('LL', 0x20080522, 0), pack('L6', (0) x 6));
}

sub run_attempt {
    my ($launch, $log, $go, $ready) = @_;
    close $ready;
    POSIX::setsid();
    detach($log);
    my $got;
    do { $got = sysread $go, my $byte, 1 } until defined $got || $! != POSIX::EINTR();
    POSIX::_exit(127) unless $got;
    confined($launch) if length $launch->{TY_UID};
    exec { '/bin/sh' } '/bin/sh', $launch->{TY_SCRIPT}
      or print STDERR "trainyard: cannot run /bin/sh: $!\n";
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
    my $own = length $launch{TY_UID};
    my $why = !chdir($launch{TY_WORK}) ? 'cannot enter the work directory'
      : !open($log, '>>', $launch{TY_LOG}) ? 'cannot open the log file'
      : $own && !%nr ? 'running a job as a user of its own needs x86_64 or aarch64'
      : $own && !(job_id($launch{TY_UID}) && job_id($launch{TY_GID}))
        ? "${NOT_JOB_IDS}"
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
    return report("ended $id 2\n") unless job_id($uid);
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
        record($exit_file, "status $status\n") if defined $exit_file && !-s $exit_file;
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
