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

// AttemptAt defines the shell function _gD: _gD <attempt> sets _gF to the
// path of the attempt's files under _gb (the attempts directory), without
// their extension: <shard>/<attempt>, or <attempt> in _gb itself when an
// earlier build started it there (its run or pid file is there). Every
// script that finds an attempt's files finds them with it.
const AttemptAt = `_gD() { _gF="$_gb/${1%%.*}/$1"; if [ -e "$_gb/$1.run" ] || [ -e "$_gb/$1.pid" ]; then _gF="$_gb/$1"; fi; }
`

// setAttemptDir is the shell that sets _gd to attempt's files (AttemptAt).
func setAttemptDir(attempt string) string {
	return AttemptAt + `_gD ` + Quote(attempt) + `; _gd=$_gF
`
}

// SweepText is the shell that removes, under _gb, what is older than 7
// days: the files of the attempts directory and of its directories, then
// the directories left empty that nothing has changed for an hour (one an
// attempt just made is never removed under it, and rmdir fails on one
// that is not empty). stamp, a word the shell expands in double quotes,
// names today's stamp file: the day's other attempts find it and sweep
// nothing.
func SweepText(stamp string) string {
	s := `"$_gb/` + stamp + `"`
	return `[ -e ` + s + ` ] || { rm -f "$_gb"/.swept-*; : >` + s + `; find "$_gb" -mindepth 1 -maxdepth 2 ! -type d -mtime +7 -exec rm -f {} + 2>/dev/null; find "$_gb" -mindepth 1 -maxdepth 1 -type d -empty -mmin +60 -exec rmdir {} + 2>/dev/null; }`
}
