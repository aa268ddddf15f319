package hostsh

import "strings"

// Where an attempt's files are. A host keeps each attempt's files in a
// directory of the attempts directory named by the attempt id's first
// part, before its first '.': for a node's attempt, its workflow's id
// (<attempts>/<workflow id>/<attempt>.run, .out, .err, .id, .output). A
// directory then holds one workflow's attempts on the host, not every
// attempt of the last 7 days: the files of an attempt cost the host more
// to make and find the more files their directory holds. An attempt that
// a build before this layout started has its files in the attempts
// directory itself (<attempts>/<attempt>.run, or .pid before that): it is
// found there, by its run (or pid) file, and used where it is.

// AttemptShard is the directory of the attempts directory that keeps the
// files of the attempt id (ValidAttempt): the id up to its first '.', all
// of it when it has none.
func AttemptShard(id string) string {
	shard, _, _ := strings.Cut(id, ".")
	return shard
}

// AttemptPath is where attempt id's files are under the attempts
// directory, without their extension: <shard>/<id>.
func AttemptPath(id string) string { return AttemptShard(id) + "/" + id }

// AttemptAt defines two shell functions. _gD <attempt> sets _gF to the
// path of the attempt's files under _gb (the attempts directory), without
// their extension: <shard>/<attempt>, or <attempt> in _gb itself when an
// earlier build started it there (its run or pid file is there). Every
// script that finds an attempt's files finds them with it. _gK makes the
// directories an attempt is claimed in (_gd set): _gb and the locks
// directory beside it (mode 700) when missing, and the attempt's
// directory with the mode of _gb, its set-group-ID bit too, whatever the
// umask: 700 when gantry made _gb, and as a directory shared by a group's
// users has it, so that they all go on using it.
const AttemptAt = `_gD() { _gF="$_gb/${1%%.*}/$1"; if [ -e "$_gb/$1.run" ] || [ -e "$_gb/$1.pid" ]; then _gF="$_gb/$1"; fi; }
_gK() { mkdir -p -m 700 "$_gb" "$_gb/../locks" || return; [ "${_gd%/*}" != "$_gb" ] && [ ! -d "${_gd%/*}" ] || return 0; _gO=$(stat -c %a "$_gb" 2>/dev/null) || _gO=700; mkdir -m "$_gO" "${_gd%/*}" 2>/dev/null || [ -d "${_gd%/*}" ]; }
`

// setAttemptDir is the shell that sets _gd to attempt's files (AttemptAt).
func setAttemptDir(attempt string) string {
	return AttemptAt + `_gD ` + Quote(attempt) + `; _gd=$_gF
`
}

// SweepText is the shell that removes, under _gb, what is older than 7
// days: the files of the attempts directory and of its directories
// (yesterday's stamp files too, in a week), then the directories left
// empty that nothing has changed for an hour (one an attempt just made is
// never removed under it, and rmdir fails on one that is not empty).
// stamp, a word the shell expands in double quotes, names today's stamp
// file: the attempt that creates it (an exclusive create) sweeps, the
// day's others find it and sweep nothing. The create is echo's: a failed
// redirection of ':' (a special built-in) would end the shell.
func SweepText(stamp string) string {
	s := `"$_gb/` + stamp + `"`
	return `[ -e ` + s + ` ] || { set -C; if echo 2>/dev/null >` + s + `; then set +C; find "$_gb" -mindepth 1 -maxdepth 2 ! -type d -mtime +7 -exec rm -f {} + 2>/dev/null; find "$_gb" -mindepth 1 -maxdepth 1 -type d -empty -mmin +60 -exec rmdir {} + 2>/dev/null; fi; set +C; }`
}
