# Sourced by the benchmark scripts that run a bounded step (`timeout ... python3 ...`). `timeout` puts itself in a
# process group of its own, so a stop sent to its caller's group (an outer `timeout`, Ctrl-C) never reached the step:
# the script died or waited, and the step ran on to its own limit, writing results after its caller had collected
# them. Here:
#   stoppable CMD [ARGS...]   run CMD in the background, forward INT and TERM to it, and wait until it has ended, so
#                             a stopped call stops its step, keeps what the step finished, and leaves nothing running;
#                             returns CMD's exit status, and sets stopped=1 when a stop came meanwhile (the caller's
#                             own INT and TERM traps are back in place after it)
#   ... | keep_log FILE       tee into FILE, deaf to INT and TERM, so the log takes every line until its writers end
#   wait_all                  wait until every background job of the script has ended: a stop interrupts `wait`,
#                             and the jobs, which keep what they finished, are waited for again
# A script that should collect its results after a stop sets `trap 'stopped=1' INT TERM`: bash runs that trap once
# the command it waits for has ended, and the script goes on (and can skip what it has not started yet).
stoppable() {
  local child="" status saved interrupted=""
  saved=$(trap -p INT TERM)
  trap 'stopped=1; interrupted=1; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null' INT TERM
  "$@" &
  child=$!
  [ -n "${stopped:-}" ] && kill -TERM "$child" 2>/dev/null
  wait "$child"
  status=$?
  # a signal the trap took ends `wait` early with 128 + its number: wait again, for the step's own status (bash keeps
  # it for a child that has already ended), and again for each signal meanwhile
  while [ -n "$interrupted" ]; do
    interrupted=""
    wait "$child"
    status=$?
  done
  trap - INT TERM
  eval "$saved"
  return "$status"
}

keep_log() {
  (trap '' INT TERM; exec tee "$@")
}

wait_all() {
  while [ -n "$(jobs -pr)" ]; do wait; done
}
