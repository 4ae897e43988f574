/**
 * The Linux system calls that the Perl helpers (the spawner, a channel's trampoline) make by
 * number, Perl having no binding for them, as Perl: `%nr` maps a call's name to its number on
 * x86_64 and aarch64, and is empty on any other architecture, where every such call then fails.
 * The script it goes in must `use Config`.
 */
export const PERL_SYSCALLS = String.raw`
my %nr = %{{
    x86_64 => { unshare => 272, mount => 165, prctl => 157, setgroups => 116, setresgid => 119,
                setresuid => 117, capset => 126, umount2 => 166 },
    aarch64 => { unshare => 97, mount => 40, prctl => 167, setgroups => 159, setresgid => 149,
                 setresuid => 147, capset => 91, umount2 => 39 },
}->{($Config{archname} =~ /\A([^-]+)-linux/)[0] // ''} // {}};`.trim();
