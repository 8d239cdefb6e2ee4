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

# With TOUCH_MEMORY=1, writes a byte into every page of the machine's available memory
# (all but 2 GiB) once, then lets it go. On a VM whose host backs a guest page only when it
# is first touched, the page cache of a log file that lands on such memory costs ten times
# as much to write (about 11 µs a page here); a series of runs then measures where the
# cache lands, not the server (benches/README.md, "Where the access line's server CPU goes,
# by thread"). About 50 s for 17 GiB on this machine; once after boot is enough.
touch_memory() {
  [ "${TOUCH_MEMORY:-0}" = 1 ] || return 0
  python3 - <<'PY'
import mmap
available = next(int(line.split()[1]) * 1024 for line in open("/proc/meminfo")
                 if line.startswith("MemAvailable:"))
size = max(0, available - 2 * 2**30) // mmap.PAGESIZE * mmap.PAGESIZE
if size:
    memory = mmap.mmap(-1, size)
    for offset in range(0, size, mmap.PAGESIZE):
        memory[offset] = 1
    memory.close()
print(f"== touched {size / 2**30:.1f} GiB of available memory once (TOUCH_MEMORY=1)")
PY
  # Not again in the runs this script starts (the bare run beside the shipped one).
  export TOUCH_MEMORY=0
}
