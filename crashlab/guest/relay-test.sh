#!/bin/sh
# Guest side of crashlab/relay-sim.sh (busybox sh, run by /init in crashlab.mode=relay).
# Makes a simulated GPIO chip (gpio-sim, configured through configfs: the kernel's
# Documentation/admin-guide/gpio/gpio-sim.rst), then drives line 17 of /board.toml with
# /relaycheck (the power-cut controller's relay) through each libgpiod under /gpiod/* and reads
# the line's value from sysfs after every step. One line per check:
#   CRASHLAB_RELAY ver=V step=S value=X expected=Y ok|FAIL
# Cut level 1 (the relay's normally-closed contact): power on is 0, a cut is 1, and a released
# line falls to its pull-down (a Pi's GPIO 17 default), 0: powered.
set -u
# A command sent after relaycheck died must fail, not kill this script.
trap '' PIPE
ON=0; CUT=1
mount -t configfs none /sys/kernel/config || { echo "CRASHLAB_RELAY setup: no configfs"; exit 1; }
C=/sys/kernel/config/gpio-sim/relay
mkdir "$C" "$C/bank0" && echo 28 > "$C/bank0/num_lines" && echo 1 > "$C/live" ||
  { echo "CRASHLAB_RELAY setup: gpio-sim chip not made"; exit 1; }
CHIP=$(cat "$C/bank0/chip_name"); DEV=$(cat "$C/dev_name")
LINE=/sys/devices/platform/$DEV/$CHIP/sim_gpio17
echo "CRASHLAB_RELAY setup: chip=$CHIP dev=$DEV pull=$(cat "$LINE/pull") value=$(cat "$LINE/value")"
grep -q "gpio_chip = \"$CHIP\"" /board.toml || { echo "CRASHLAB_RELAY setup: /board.toml is not for $CHIP"; exit 1; }
FAILS=0

# check STEP EXPECTED: the line's value now, or within 3 s (a holder dies asynchronously).
check() {
  i=0; v=$(cat "$LINE/value")
  while [ "$v" != "$2" ] && [ $i -lt 60 ]; do sleep 0.05; v=$(cat "$LINE/value"); i=$((i+1)); done
  if [ "$v" = "$2" ]; then r=ok; else r=FAIL; FAILS=$((FAILS+1)); fi
  echo "CRASHLAB_RELAY ver=$VER step=$1 value=$v expected=$2 $r"
}

# start: relaycheck in a session of its own (its pid is its process group), commands on fd 3.
start() {
  rm -f /tmp/cmd /tmp/out; mkfifo /tmp/cmd
  setsid /relaycheck --board /board.toml < /tmp/cmd > /tmp/out 2>&1 &
  PID=$!
  exec 3> /tmp/cmd
  done_ new
}

# done_ WORD: wait for relaycheck's "WORD done" line (10 s).
done_() {
  i=0
  while ! grep -q "relaycheck: $1 done" /tmp/out; do
    sleep 0.05; i=$((i+1))
    if [ $i -gt 200 ]; then
      echo "CRASHLAB_RELAY ver=$VER step=$1 no answer: $(tr '\n' ' ' < /tmp/out) FAIL"; FAILS=$((FAILS+1)); return 1
    fi
  done
}

send() { echo "$1" >&3; done_ "$1"; }

# holders: the pids of the gpioset processes alive (busybox-static has no pgrep).
holders() {
  for d in /proc/[0-9]*; do
    case "$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null)" in *gpioset.bin*) echo "${d#/proc/}" ;; esac
  done
}

# finish: close fd 3, reap relaycheck, end every holder left (the next run starts released).
finish() {
  exec 3>&-
  wait "$PID" 2>/dev/null
  for h in $(holders); do kill "$h" 2>/dev/null; done
  i=0; while [ -n "$(holders)" ] && [ $i -lt 60 ]; do sleep 0.05; i=$((i+1)); done
}

for dir in /gpiod/*; do
  export PATH="$dir:/bin"
  VER=$(gpioset --version | awk 'NR==1{print $NF}')
  echo "CRASHLAB_RELAY ver=$VER using $dir"
  # A run: power on, cut, restore, cut, and a normal end (the dropped relay holds power on).
  start;          check power-on $ON
  send cut;       check cut $CUT
  send on;        check restore $ON
  send cut;       check cut-again $CUT
  echo quit >&3;  done_ quit; wait "$PID"; check normal-end $ON
  finish;         check released $ON
  # An error mid-cut: the controller exits without its destructor; its holder dies with it.
  start; send cut; check cut $CUT
  echo error >&3; wait "$PID"; check error-exit $ON
  finish
  # Ctrl-C mid-cut: SIGINT to the controller's process group, as a terminal sends it.
  start; send cut; check cut $CUT
  kill -INT -"$PID"; check ctrl-c $ON
  finish
  # SIGKILL of the controller alone mid-cut (the OOM killer, `kill -9 PID`).
  start; send cut; check cut $CUT
  kill -KILL "$PID"; check sigkill $ON
  finish
done
echo "CRASHLAB_RELAY_FAILS=$FAILS"
[ "$FAILS" = 0 ]
