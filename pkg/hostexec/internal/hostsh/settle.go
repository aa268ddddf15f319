package hostsh

import "strconv"

// MaxTail is how much of each output file a settle reads back (the end):
// as much as a Result keeps of each stream (hostexec.MaxTail).
const MaxTail = 4096

// SettleMarker starts the first stdout line of a settle: what it found.
const SettleMarker = "__gantry_settle "

// SettleScript settles attempt (see hostexec.AttemptRunner.Settle). base
// is the shell that sets _gb, its attempts directory (attemptsBase). Its
// first stdout line is SettleMarker followed by "absent", "lost", "alive",
// or "ended" or "killed" and the recorded exit status; then the tails of
// the attempt's output files, on stdout and stderr.
func SettleScript(attempt, base string) string {
	// The run file is created with the supervisor's pid in one write, but
	// one may look between the create and the write: wait for the pid (at
	// most 5 s), as a re-attach does. A supervisor that is gone without an
	// exit status may be writing it: wait a second for it. A pid that is
	// no longer the supervisor's (CheckID: the host restarted) is not
	// signalled: the attempt is lost.
	return base + `; _gd="$_gb/"` + Quote(attempt) + `
` + CheckID + `_ge() { _gx=; { read -r _gx; read -r _gx; } 2>/dev/null <"$_gd.run"; [ -n "$_gx" ] || { [ -s "$_gd.exit" ] && read -r _gx <"$_gd.exit"; }; [ -n "$_gx" ]; }
if [ ! -e "$_gd.run" ] && [ ! -e "$_gd.pid" ]; then echo '` + SettleMarker + `absent'; exit 0; fi
_gp=; _gi=0; until { read -r _gp 2>/dev/null <"$_gd.run"; [ -n "$_gp" ]; } || [ -s "$_gd.pid" ] || [ $_gi -ge 250 ]; do sleep 0.02; _gi=$((_gi+1)); done
[ -n "$_gp" ] || { [ -s "$_gd.pid" ] && read -r _gp <"$_gd.pid"; }
[ -n "$_gp" ] && ! _gJ "$_gp" && _gp=
_gkill() {
` + KillText(`"$_gp"`, `"$_gd"`, "ended") + `}
_gk=ended
if ! _ge; then
  if [ -n "$_gp" ] && kill -0 "$_gp" 2>/dev/null; then
    _gk=$(_gkill)
    case $_gk in gone) _gk=killed ;; ended) ;; *) echo '` + SettleMarker + `alive'; exit 0 ;; esac
  else
    _gi=0; until _ge || [ $_gi -ge 50 ]; do sleep 0.02; _gi=$((_gi+1)); done
  fi
fi
_gy=; { read -r _gy; read -r _gy; read -r _gy; } 2>/dev/null <"$_gd.run"; [ "$_gy" = killed ] && _gk=killed
[ "$_gy" = ` + Unstarted + ` ] && { echo '` + SettleMarker + `absent'; exit 0; }
if _ge; then echo "` + SettleMarker + `$_gk $_gx"; else echo '` + SettleMarker + `lost'; fi
tail -c ` + strconv.Itoa(MaxTail) + ` "$_gd.out" 2>/dev/null; tail -c ` + strconv.Itoa(MaxTail) + ` "$_gd.err" >&2 2>/dev/null
exit 0
`
}
