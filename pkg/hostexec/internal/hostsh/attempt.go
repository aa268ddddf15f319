package hostsh

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Durable commands. An Attempt (hostexec.Attempt) runs on its host under a
// small shell supervisor, as Ansible's async wrapper does: the command's
// output and, at the end, its exit status are kept in files on the host
// (${GANTRY_ATTEMPTS:-$HOME/.gantry/attempts}/<attempt>.{run,out,err}: the
// run file holds the supervisor's pid on its first line and, once the
// command ended, its exit status on the second; the id file, who that pid
// is: see RecordID),
// and the command lives in its own session, so it outlives the connection
// that started it. Running the same Attempt again re-attaches: it waits
// for the running command (streaming its output again from the start), or
// reads the result it recorded, and never starts a second copy. The
// files of attempts that ended more than 7 days ago are removed by the
// first attempt of each day (UTC) on the host (Sweep): a stamp file names
// the day, so the other attempts pay only a shell test for it.
//
// The host needs a POSIX sh, flock, setsid (the daily sweep; without it
// only the sweep does not run), and GNU coreutils' tee -p and tail
// --pid (Debian, Ubuntu, RHEL and their images have them). The common path
// costs the host three program starts more than a plain command (two tee
// and flock), two subshells for the output pipes and one for the command,
// and three new files.

// LostExit is the exit status the supervisor script gives a lost attempt;
// the last line of its stderr is LostPrefix, the attempt's id and
// LostSuffix.
const LostExit = 254

// LostPrefix starts, and LostSuffix ends, the line that says an attempt
// was lost.
const LostPrefix = "gantry: attempt "

// LostSuffix ends the line that says an attempt was lost.
const LostSuffix = " ended on this host without an exit status (killed outside gantry, or the host restarted)"

// Lost says whether a supervisor's exit status and stderr say its attempt
// was lost (a command of its own that exits LostExit is not taken for
// it).
func Lost(exitCode int, stderr string) bool {
	last := LastLine(stderr)
	return exitCode == LostExit && strings.HasPrefix(last, LostPrefix) && strings.HasSuffix(last, LostSuffix)
}

// NoFilesExit is the exit status the supervisor script gives an attempt
// whose files it could not make (its directory cannot be made or written:
// GANTRY_ATTEMPTS or HOME points where the user cannot write); the last
// line of its stderr says why, after NoFilesPrefix. Nothing started.
const NoFilesExit = 253

// NoFilesPrefix starts the line that says why an attempt's files could
// not be made.
const NoFilesPrefix = "gantry: the attempt's files cannot be made: "

// NoFiles says whether a supervisor's exit status and stderr say its
// attempt's files could not be made (a command of its own that exits
// NoFilesExit is not taken for it), and why.
func NoFiles(exitCode int, stderr string) (string, bool) {
	if exitCode != NoFilesExit {
		return "", false
	}
	return strings.CutPrefix(LastLine(stderr), NoFilesPrefix)
}

// ValidAttempt checks an attempt id: one path segment of letters, digits,
// '.', '_' and '-', not starting with '.'.
func ValidAttempt(id string) error {
	if id == "" || len(id) > 200 || id[0] == '.' {
		return fmt.Errorf("attempt id %q: must be 1-200 characters, not starting with '.'", id)
	}
	for _, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
		if !ok {
			return fmt.Errorf("attempt id %q: %q is not allowed", id, r)
		}
	}
	return nil
}

// SweepDay names the day of the last sweep of old attempt files (UTC).
var SweepDay = func() string { return time.Now().UTC().Format("20060102") }

// Sweep is the shell that removes, once a day (the first attempt of the
// day named by stamp, a shell word), what the attempts directory $_gb
// holds that is older than 7 days: an attempt's files once it ended (its
// run file has its exit status, or its pid runs no more, or runs another
// process than the one its id file names: CheckID), never those of one
// still running, whatever their age says (a host whose clock jumped
// forward, an attempt running for more than 7 days): its run file is its
// claim, and its exit status is read from it. Files of an attempt whose
// run file is younger stay with it. It runs in the background in a
// session of its own (setsid: not in the attempt's process group, so a
// kill of the attempt neither stops it nor takes it, or what started
// after it, for the attempt's), its output and the host lock (fd 9)
// closed, so an attempt never waits for it; a batch of entries a shell,
// with builtins but for rm.
func Sweep(stamp string) string {
	return `[ -e "$_gb/.swept-` + stamp + `" ] || { rm -f "$_gb"/.swept-*; : >"$_gb/.swept-` + stamp + `"; setsid find "$_gb" -mindepth 1 -maxdepth 1 -mtime +7 -exec /bin/sh -c ` + Quote(sweepBatch) + ` sweep {} + </dev/null >/dev/null 2>&1 9>&- & }`
}

// sweepBatch removes the old entries it is given (Sweep).
const sweepBatch = `_gN=; { read -r _gN </proc/sys/kernel/random/boot_id; } 2>/dev/null
for _gs; do
  case $_gs in
  *.run)
    _gp=; _gx=; { read -r _gp; read -r _gx; } <"$_gs" 2>/dev/null
    case $_gp in ''|*[!0-9]*|0|1) _gp= ;; esac
    if [ -z "$_gx" ] && [ -n "$_gp" ] && { kill -0 "$_gp" 2>/dev/null || [ -d "/proc/$_gp" ]; }; then
      _gB=; _gS=; { read -r _gB _gS <"${_gs%.run}.id"; } 2>/dev/null
      [ -n "$_gS" ] && [ -n "$_gN" ] || continue
      _gl=; { read -r _gl <"/proc/$_gp/stat"; } 2>/dev/null
      set -- ${_gl##*) }
      [ "$_gN" = "$_gB" ] && [ "${20}" = "$_gS" ] && continue
    fi
    _gs=${_gs%.run}; rm -rf "$_gs.run" "$_gs.out" "$_gs.err" "$_gs.id" "$_gs.f" "$_gs.pid" "$_gs.exit" ;;
  *.out|*.err|*.id|*.f) [ -e "${_gs%.*}.run" ] || rm -rf "$_gs" ;;
  *) rm -rf "$_gs" ;;
  esac
done`

// AttemptsDir is the attempts directory as a plain command's shell finds
// it, once the command's Env is exported.
const AttemptsDir = `"${GANTRY_ATTEMPTS:-$HOME/.gantry/attempts}"`

// A pid alone does not name the supervisor for long: after the host
// restarted, the pid in a run file without an exit status is likely held
// by another process. So a supervisor records who it is in <attempt>.id
// ($_gd.id), as one line "<boot id> <start time>" (the start time is
// field 22 of /proc/<pid>/stat, in clock ticks since boot), before its pid
// is read by anyone who would signal or wait on it: a settle and a
// re-attach do so only while both still match, and take the attempt for
// lost otherwise. Where there is no /proc nothing is recorded, and an
// attempt without an id file (started by an earlier version, or read in
// the instant between the claim and the record) is trusted by its pid as
// before.

// RecordID defines the shell function _gI, which writes the id file of the
// attempt at $_gd for the shell it runs in.
const RecordID = `_gI() { read -r _gB </proc/sys/kernel/random/boot_id && read -r _gS </proc/$$/stat && set -- ${_gS##*) } && echo "$_gB ${20}" >"$_gd.id"; } 2>/dev/null
`

// CheckID defines the shell function _gJ: _gJ <pid> is false when the id
// file of the attempt at $_gd names another process than pid's (another
// boot, another start time, or none by that pid), true when it names
// pid's, or there is no id file or no /proc to tell.
const CheckID = `_gJ() { _gB=; _gS=; { read -r _gB _gS <"$_gd.id"; } 2>/dev/null; [ -n "$_gS" ] || return 0; _gN=; { read -r _gN </proc/sys/kernel/random/boot_id; } 2>/dev/null; [ -n "$_gN" ] || return 0; [ "$_gN" = "$_gB" ] || return 1; _gl=; { read -r _gl <"/proc/$1/stat"; } 2>/dev/null; set -- ${_gl##*) }; [ "${20}" = "$_gS" ]; }
`

// Supervision is what a session supervisor (SuperviseScript) runs.
type Supervision struct {
	Attempt, Lock, Mark string
	// Base is the shell that sets _gb, the attempts directory: from the
	// host's environment and the command's Env only, never its secrets
	// (attemptsBase).
	Base string
	// Read comes right after Base: the read of the secrets' line when they
	// travel on stdin (ReadSecretLine), or nothing.
	Read string
	// Run is what the attempt's subshell evaluates: the secrets (when read
	// above), the command's Env as exports, then its script. Nothing of it
	// is seen by the supervisor's own shell.
	Run string
	// Held: the caller took the lock already and passes it on fd 3
	// (transport local): the script keeps it on fd 9 for the attempt, and
	// drops it when it re-attaches instead.
	Held bool
}

// SuperviseScript runs the attempt or re-attaches to it. Its first stdout
// line is PIDMarker, the process group of the command (the supervisor's
// session) and the attempt's directory (see marked).
func SuperviseScript(sv Supervision) string {
	q := Quote
	attempt, lock, mark, held := sv.Attempt, sv.Lock, sv.Mark, sv.Held
	// The attempt starts where its run file can be created with its pid
	// (noclobber: an atomic create; echo is a builtin that a failed
	// redirection does not end the shell for); anywhere else it re-attaches.
	// The shell that starts it is its supervisor: a session leader (sshd)
	// or a process group leader (transport local) without a terminal, so
	// the end of the connection does not signal it. It appends the exit
	// status to the run file; tee -p keeps writing the output files when
	// the connection is gone. The marker is written with SIGPIPE ignored:
	// if the connection is already gone, the write fails instead of ending
	// the supervisor; the default comes back before anything is started
	// (the command would inherit an ignored SIGPIPE). The command runs in
	// a subshell of its own (a fork, no new program): eval'd there, an
	// exit or exec in it ends that subshell only. One that re-attaches
	// right after another created the run file waits (at most 5 s) for the
	// pid in it, rather than take the attempt for lost; a pid that is no
	// longer the supervisor's (CheckID) is not waited for, nor handed on
	// to be killed. The output files are made with the claim, so one that
	// re-attaches finds them (the tees make them too, a moment later), and
	// a re-attach's tails keep their own complaints out of the output:
	// only the command writes there.
	//
	// Attempts started by an earlier version kept the pid and the exit
	// status in <attempt>.pid and <attempt>.exit: re-attaching reads those
	// too.
	pre, drop := "", ""
	if held && lock != "" {
		pre, drop = "exec 9>&3 3>&-; ", "exec 9>&-; "
	}
	return pre + sv.Base + `; _gd="$_gb/"` + q(attempt) + `; ` + sv.Read + `
` + RecordID + CheckID + `_gn() { set -C; echo $$ 2>/dev/null >"$_gd.run"; _gc=$?; set +C; return $_gc; }
_ge() { _gx=; { read -r _gx; read -r _gx; } 2>/dev/null <"$_gd.run"; [ -n "$_gx" ] || { [ -s "$_gd.exit" ] && read -r _gx <"$_gd.exit"; }; [ -n "$_gx" ]; }
if _gn || { [ ! -e "$_gd.run" ] && mkdir -p -m 700 "$_gb" "$_gb/../locks" 2>/dev/null && _gn; }; then
  _gI; : >>"$_gd.out"; : >>"$_gd.err"
  ` + Sweep(SweepDay()) + `
  trap '' PIPE; printf '` + PIDMarker + `%s %s\n' "$$" "$_gd" 2>/dev/null; trap - PIPE
  { { ` + HostLock(lock, mark, held) + `( ` + sv.Run + ` ) </dev/null 9>&-; echo $? >>"$_gd.run"; } 2>&1 1>&3 3>&- | tee -p -a "$_gd.err" 1>&2 3>&-; } 3>&1 | tee -p -a "$_gd.out" 2>/dev/null
elif [ ! -e "$_gd.run" ] && [ ! -e "$_gd.pid" ]; then
  _gw=$(mkdir -p "$_gb" 2>&1) && _gw="$_gb is not writable by $(id -un)"
  echo "` + NoFilesPrefix + `$_gw" >&2
  exit ` + strconv.Itoa(NoFilesExit) + `
else
  ` + drop + `_gi=0; until { _gp=; read -r _gp 2>/dev/null <"$_gd.run"; [ -n "$_gp" ]; } || [ -s "$_gd.pid" ] || [ -s "$_gd.exit" ] || [ $_gi -ge 250 ]; do sleep 0.02; _gi=$((_gi+1)); done
  [ -n "$_gp" ] || { [ -s "$_gd.pid" ] && read -r _gp <"$_gd.pid"; }
  case $_gp in *[!0-9]*|0|1) _gp= ;; esac
  [ -n "$_gp" ] && ! _ge && ! _gJ "$_gp" && _gp=
  printf '` + PIDMarker + `%s %s\n' "${_gp:-0}" "$_gd"
  if [ -n "$_gp" ] && kill -0 "$_gp" 2>/dev/null && ! _ge; then
    ( until _ge || ! kill -0 "$_gp" 2>/dev/null || ! _gJ "$_gp"; do sleep 0.1; done ) & _gw=$!
    tail -c +1 -s 0.1 -f --pid="$_gw" "$_gd.out" 2>/dev/null & _gt=$!
    tail -c +1 -s 0.1 -f --pid="$_gw" "$_gd.err" >&2 2>/dev/null
    wait $_gt
  else
    cat "$_gd.out" 2>/dev/null; cat "$_gd.err" >&2 2>/dev/null
  fi
fi
_gi=0; until _ge || [ $_gi -ge 50 ]; do sleep 0.02; _gi=$((_gi+1)); done
_ge && exit "$_gx"
echo "` + LostPrefix + attempt + LostSuffix + `" >&2
exit ` + strconv.Itoa(LostExit) + `
`
}

// HostLock is the shell that takes the host's lock named lock (when not
// empty) on fd 9 for the rest of the attempt: one attempt holds it at a
// time, on this host, whichever executor or workflow started it. One that
// has to wait says for whom, on stderr. held: the shell holds it on fd 9
// already, and whoever took it (the worker, the host agent) has named the
// attempt its holder: nothing is left to do. The holder file names the
// attempt, followed by its mark when it has one (holderLine).
func HostLock(lock, mark string, held bool) string {
	if lock == "" {
		return ""
	}
	dir := `"$_gb/../locks"`
	l := dir + `/` + Quote(lock)
	if held {
		return ""
	}
	return `{ [ -d ` + dir + ` ] || mkdir -p ` + dir + `; } && command exec 9>>` + l + ` && { flock -n 9 || { read -r _gh _gj 2>/dev/null <` + l + `.holder; [ -n "$_gh" ] || { sleep 0.2; read -r _gh _gj 2>/dev/null <` + l + `.holder; }; echo "gantry: waiting for $_gh on this host" >&2; flock 9; }; } && echo "${_gd##*/}` + MarkWord(mark) + `" >` + l + `.holder; `
}

// MarkWord is what follows an attempt id in a lock's holder file: a
// space and the attempt's mark, or nothing. (A mark has the characters
// of an attempt id: it needs no quoting.)
func MarkWord(mark string) string {
	if mark == "" {
		return ""
	}
	return " " + mark
}

// KillScript ends a process group (SIGTERM, then SIGKILL after about two
// seconds) and prints "gone" once none of it is left. For a durable
// attempt (dir, the path its files start with, not empty) it records the kill as the
// attempt's exit status if the command did not record one.
func KillScript(pgid int, dir string) string {
	d := ""
	if dir != "" {
		d = Quote(dir)
	}
	return KillText(strconv.Itoa(pgid), d, "gone")
}

// KillText is KillScript with the process group g and the attempt's path
// d as shell words (d empty: not a durable attempt), and ended what it
// prints when the attempt had recorded its exit status already (nothing
// is killed then).
func KillText(g, d, ended string) string {
	var b strings.Builder
	if d != "" {
		// An attempt that recorded its exit status has ended: its group
		// (a host agent's) may run another attempt by now.
		b.WriteString(`d=` + d + `; x=; { read -r x; read -r x; } <"$d.run" 2>/dev/null; [ -n "$x" ] && { echo ` + ended + `; exit 0; }
`)
	}
	// A member that has exited but is not reaped yet (a zombie: its
	// parent died in the kill, and init reaps it when it gets to it,
	// which some inits do about once a second) holds nothing: it counts
	// as gone.
	b.WriteString(`g=` + g + `; _gz() { l=; { read -r l <"$1"; } 2>/dev/null || return 1; l=${l##*) }; [ "${l%% *}" != Z ]; }
alive() { kill -0 -$g 2>/dev/null || return 1; for f in /proc/[0-9]*/stat; do l=; { read -r l <"$f"; } 2>/dev/null; l=${l##*) }; set -- $l; [ "$3" = "$g" ] && [ "$1" != Z ] && return 0; done; [ -d /proc/self ] || return 0; return 1; }
sig() { kill -$1 -$g 2>/dev/null; }
`)
	if d != "" {
		// A host agent's group also holds what the attempts it ran before
		// left running in the background: of the group, the attempt's are
		// its leader and what started with or after the leader's oldest
		// child (the attempt's subshell, or the flock it waits in). With no
		// child (a session supervisor's group is the attempt's alone), the
		// whole group. Start times count clock ticks (10 ms): of the
		// members that started in the same tick as that child, only those
		// whose parent is in the group are the attempt's (an earlier
		// attempt's leftover was orphaned when its subshell ended). Those
		// are listed once, before any signal orphans the attempt's own;
		// members that start later are added at each step.
		b.WriteString(`_gs() { l=; { read -r l <"$1"; } 2>/dev/null; l=${l##*) }; set -- $l; _gpp=$2 _gpg=$3 _gst=${20}; [ -n "$_gst" ]; }
t=; for f in /proc/[0-9]*/stat; do _gs "$f" && [ "$_gpp" = "$g" ] && [ "$_gpg" = "$g" ] && { [ -z "$t" ] || [ "$_gst" -lt "$t" ]; } && t=$_gst; done
if [ -n "$t" ]; then
  members() { for f in /proc/[0-9]*/stat; do p=${f#/proc/}; p=${p%/stat}; { [ "$p" != "$g" ] && _gs "$f" && [ "$_gpg" = "$g" ]; } || continue; if [ "$_gst" -gt "$t" ]; then echo $p; elif [ "$1" = all ] && [ "$_gst" -eq "$t" ] && _gs "/proc/$_gpp/stat" && [ "$_gpg" = "$g" ]; then echo $p; fi; done; }
  T="$g $(members all)"
  targets() { echo $T; members later; }
  alive() { for p in $(targets); do kill -0 $p 2>/dev/null && _gz /proc/$p/stat && return 0; done; return 1; }; sig() { kill -$1 $(targets) 2>/dev/null; }
fi
`)
	}
	b.WriteString(`sig TERM; i=0; while [ $i -lt 20 ] && alive; do sleep 0.1; i=$((i+1)); done
s=143; if alive; then s=137; sig KILL; i=0; while [ $i -lt 20 ] && alive; do sleep 0.1; i=$((i+1)); done; fi
if alive; then echo "still running"; exit 1; fi
`)
	if d != "" {
		// the exit status goes where the attempt's supervisor keeps it: the
		// run file's second line, followed by a line "killed" (what a
		// settle reports: see hostexec.AttemptRunner.Settle), or
		// <attempt>.exit for one started by an earlier version (it has a
		// .pid file)
		b.WriteString(`d=` + d + `; if [ -e "$d.pid" ]; then [ -s "$d.exit" ] || echo $s >"$d.exit"
else x=; { read -r x; read -r x; } <"$d.run" 2>/dev/null; [ -n "$x" ] || printf '%s\nkilled\n' $s >>"$d.run"; fi
`)
	}
	b.WriteString("echo gone\n")
	return b.String()
}

// Unstarted is the third line of the run file of an attempt that its
// cancel claimed: it never started.
const Unstarted = "unstarted"

// CancelScript ends the durable attempt at "$_gb"/attempt (base sets
// _gb) that was asked to start but did not say it started: it may start
// any moment. It claims the attempt first, with the atomic create of its
// run file that a supervisor starts an attempt with, and records it never
// started (no pid, the status a kill by SIGTERM gives, "unstarted"): a
// supervisor that comes to it later finds the attempt claimed and starts
// nothing, a re-attach reads that status, a settle says it never started. When a supervisor claimed it first, it waits for the pid in
// the run file (at most 5 s, as a re-attach does) and kills the
// supervisor's process group as KillScript does. It prints "gone" once
// nothing of the attempt runs.
func CancelScript(base, attempt string) string {
	return base + `; _gd="$_gb/"` + Quote(attempt) + `
` + CheckID + `_gn() { set -C; echo '0
143
` + Unstarted + `' 2>/dev/null >"$_gd.run"; _gc=$?; set +C; return $_gc; }
if _gn || { [ ! -e "$_gd.run" ] && mkdir -p -m 700 "$_gb" 2>/dev/null && _gn; }; then echo gone; exit 0; fi
_gp=; _gi=0; until { read -r _gp 2>/dev/null <"$_gd.run"; [ -n "$_gp" ]; } || [ $_gi -ge 250 ]; do sleep 0.02; _gi=$((_gi+1)); done
[ -n "$_gp" ] || { echo "no pid in the attempt's run file"; exit 1; }
_gJ "$_gp" && [ "$_gp" -gt 1 ] 2>/dev/null || { echo gone; exit 0; }
` + KillText(`"$_gp"`, `"$_gd"`, "gone")
}

// OutputPrelude makes the attempt's outputs file ($_gd is the path of the
// attempt's files, in every supervisor) and names it in GANTRY_OUTPUT.
const OutputPrelude = `GANTRY_OUTPUT="$_gd.output"; export GANTRY_OUTPUT; : >"$GANTRY_OUTPUT" || exit 125
`

// NoOutputExit is the exit status of the read when there is no file.
const NoOutputExit = 3
