# What the bench scripts share; sourced by them from the repository's root.

# BARE, unless set: 1 when neither CONFIG nor SERVER_LOG names a configuration other than
# the shipped one (the bare run then follows the shipped one, printed beside it), else 0.
bare_default() {
  [ -n "${BARE:-}" ] || { [ -z "${CONFIG:-}${SERVER_LOG:-}" ] && BARE=1 || BARE=0; }
}

# With BARE=1: the calling script ($0) again with BARE=0, then the same run on the bare
# configuration, which takes over the process (exec); with BARE=0 it returns.
bare_beside() {
  [ "$BARE" = 1 ] || return 0
  BARE=0 "$0" "$@"
  echo "== beside it, the bare configuration: CONFIG=benches/bare.toml SERVER_LOG=warn"
  BARE=0 CONFIG=benches/bare.toml SERVER_LOG=warn exec "$0" "$@"
}

# Deletes the server log a run made (unless KEEP_LOG=1): at full speed the access log
# writes about 0.8 GB a run, and with the logs of earlier runs kept, later runs of the
# shipped configuration slowed (0.85x actix-naive in the first of five pinned.sh runs, 0.69x
# in the fifth, on 2026-12-05; benches/README.md).
drop_log() {
  [ -z "${1:-}" ] || [ "${KEEP_LOG:-}" = 1 ] || rm -f "$1"
}
