# The sh primitives of a remote tune apply (see reconciler/apply/sh_engine.py): POSIX sh and
# coreutils (plus awk, sed, od, dd) only. Every profile value arrives as a quoted argument.

export LC_ALL=C
umask 022
# No pathname expansion anywhere: every path arrives whole, as tune planned it, and a word taken
# from the host (a /proc/modules line, a module parameter) is split but never globbed.
set -f
R="${TUNE_ROOT:-}"
R="${R%/}"
EMU=
[ -n "${TUNE_ROOT:-}" ] && EMU=1
ERR=
# "SEQ DIR" lines: the directories each step's file writes created (`mkdir` records), which
# its restore removes again (apply.tidy); a rollback script starts with the journal's.
MADE=

# $1 as the inside of a JSON string, as json.dumps writes it: newlines and tabs escaped (a
# command's output has them), other control characters dropped.
TAB=$(printf '\t')
NL='
'
jstr() {
    printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g' | sed "s/$TAB/\\\\t/g" |
        awk 'NR > 1 { printf "%s", "\\n" } { printf "%s", $0 }' | tr -d '\000-\037'
}
# fsync one file (coreutils >= 8.24); an older sync takes no operand: sync everything then.
fsync() { sync -- "$@" 2>/dev/null || sync; }
# Append one record, whole and on disk, or leave the journal as it was and fail: a device that
# fills up takes part of a record, and the shell's printf does not always say so. A step whose
# record is not whole is not written (`rec ... || fail`). LC_ALL=C: ${#1} counts bytes.
# One dd appends, syncs and fails on a short write: measuring the journal before and after each
# record (two `wc`, a `sync`) was most of a run's processes.
# JSIZE is the journal's size as rec left it (empty: not known, measured once); whatever else
# appends to the journal empties it. A dd without oflag=append fails before it writes: the
# journal's size tells, and the shell's printf appends instead, checked by the size after it.
# RECAT: the size before a record being appended; a signal that kills dd in the middle of it
# runs the trap (`fail`) before rec can truncate, so `fail` cuts the torn part off first.
# `note` keeps a record that nothing waits on (a step's `written` and `verified`: a rollback
# restores every journaled step whatever its markers say) for the next `rec` to append in the
# same dd, so a step costs one record's sync, not three; `flush` appends what is kept.
JSIZE=
RECAT=
PEND=
note() { PEND="${PEND:+$PEND
}$1"; }
# A record that cannot be appended (or is torn by a signal: `fail`) is dropped again, its step
# not written; the kept ones wait for the next. KEPT: what was kept before it.
rec() { KEPT=$PEND; note "$1"; append && return 0; PEND=$KEPT; return 1; }
flush() { KEPT=$PEND; [ -z "$PEND" ] || append; }
append() {
    [ -n "$JSIZE" ] || JSIZE=$(($(wc -c <"$J"))) || return 1
    s=$JSIZE; JSIZE=; RECAT=$s
    # A here-document, not a pipe: dash writes a short one itself, with no process to feed dd.
    if dd of="$J" oflag=append conv=notrunc,fsync status=none 2>/dev/null <<TUNE_RECORD ||
$PEND
TUNE_RECORD
        { [ $(($(wc -c <"$J"))) -eq "$s" ] && printf '%s\n' "$PEND" >>"$J" && fsync "$J" &&
            [ $(($(wc -c <"$J"))) -eq $((s + ${#PEND} + 1)) ]; }
    # PEND first: a signal trapped between the two finds RECAT still set and cuts the
    # records off again, where an emptied RECAT would have `fail` append them twice.
    then JSIZE=$((s + ${#PEND} + 1)); PEND=; RECAT=; return 0; fi
    truncate -s "$s" "$J" 2>/dev/null
    RECAT=
    ERR="$J: cannot append a whole record (is the device full?)"
    return 1
}
now() { date -u +%Y-%m-%dT%H:%M:%SZ; }

# What the kernel prints back after V is written to a file (emulate.kernel_text).
KTEXT='
function trim(s) { gsub(/^[ \t\r\n\f\v]+|[ \t\r\n\f\v]+$/, "", s); return s }
function dec(w,  s) { s = ""; if (w ~ /^[+-]/) { s = substr(w, 1, 1); w = substr(w, 2) }
  sub(/^0+/, "", w); if (w == "") return "0"; return (s == "-" ? "-" : "") w }
function hex(w,  s, n, i) { s = 1; if (w ~ /^[+-]/) { if (w ~ /^-/) s = -1; w = substr(w, 2) }
  w = tolower(substr(w, 3)); n = 0
  for (i = 1; i <= length(w); i++) n = n * 16 + index("0123456789abcdef", substr(w, i, 1)) - 1
  return sprintf("%d", s * n) }
{ old = old " " $0 }
END {
  # Split where str.split in Python splits (emulate.kernel_text): at \r \v \f too.
  v = ENVIRON["V"]; old = trim(old); n = old == "" ? 0 : split(old, o, /[ \t\n\r\f\v]+/)
  choice = 0
  for (i = 1; i <= n; i++) if (o[i] ~ /^\[.*\]$/) choice = 1
  if (choice) {
    t = trim(v); found = 0; out = ""
    for (i = 1; i <= n; i++) { nm = o[i]; gsub(/^[][]+|[][]+$/, "", nm)
      if (nm == t) { found = 1; nm = "[" nm "]" }
      out = out (i > 1 ? " " : "") nm }
    if (!found) exit 2
    print out; exit 0 }
  t = trim(v); m = t == "" ? 0 : split(t, w, /[ \t\n\r\f\v]+/); ints = m > 0
  for (i = 1; i <= m; i++) if (w[i] !~ /^[+-]?(0x[0-9a-fA-F]+|[0-9]+)$/) ints = 0
  if (ints) { out = ""
    for (i = 1; i <= m; i++) out = out (i > 1 ? "\t" : "") (w[i] ~ /x/ ? hex(w[i]) : dec(w[i]))
    print out; exit 0 }
  print trim(v) }'

# KTEXT's answer without awk for the usual write, canonical decimal numbers to a file that
# offers no [choice]: NEW, the numbers tab-separated. Status 1: KTEXT decides.
plain_ktext() {
    case "$2" in '' | *[!0-9\ ]* | ' '* | *' ' | *'  '* | 0[0-9]* | *' '0[0-9]*) return 1 ;; esac
    while IFS= read -r l || [ -n "$l" ]; do case "$l" in *\[*) return 1 ;; esac; done <"$1"
    new=; for w in $2; do new="${new:+$new$TAB}$w"; done
}

# Whoever built the step, a primitive touches only an absolute path with no `.` or `..`
# component (host.checked): a name that a host's glob expanded never leads out of the tree it was
# found in (dash expands `.?` to `..`). Sets ERR and succeeds for a path to refuse.
abnormal() {
    case "$1" in
    /*) case "$1/" in */./* | */../*) ;; *) return 1 ;; esac ;;
    esac
    ERR="$1: refusing a path that is not absolute and normal."
}

# Whether a path accepts writes (host.writable): a path not there yet by the directory it would
# be made in (a first apply creates /var/lib/tune/runs); on a snapshot by the permission bits
# alone, whoever runs the script (emulate.writable).
writable() { existing "$1"; if [ -n "$EMU" ]; then emu_writable; else [ -w "$E" ]; fi; }

# E: $1 itself, or the nearest directory above it that exists (a variable, not a subshell's
# output: a check of hundreds of paths forks for none).
existing() {
    E="$R$1"
    while [ ! -e "$E" ] && [ ! -h "$E" ] && [ "$E" != "${E%/*}" ]; do E="${E%/*}"; done
    E="${E:-/}"
}

# Whether E accepts writes on a snapshot: by its permission bits.
emu_writable() {
    case "$EMU_W" in *"$NL$E$NL"*) return 0 ;; esac
    case $(stat -L -c %A "$E") in *w*) return 0 ;; esac
    return 1
}
# On a snapshot, the paths of $@ (with $R) that accept writes, in one `stat` for all (a script's
# many sysctls, a `stat` each before): EMU_W keeps them for emu_writable, whose answer they are
# only while the script runs. A path not there is left to emu_writable.
EMU_W=
emu_stat_all() {
    [ -n "$EMU" ] && [ $# -gt 0 ] || return 0
    for p; do case "$p" in *"$NL"*) return 0 ;; esac; done
    m=$(stat -L -c '%A %n' -- "$@" 2>/dev/null)
    EMU_W="$NL"
    while [ -n "$m" ]; do
        l=${m%%"$NL"*}
        case "$m" in *"$NL"*) m=${m#*"$NL"} ;; *) m= ;; esac
        case "${l%% *}" in *w*) EMU_W="$EMU_W${l#* }$NL" ;; esac
    done
}

# A write the kernel rejects (host.refusal): REFUSED=1 for EINVAL, EOPNOTSUPP and ENOTSUPP (524),
# which say the knob cannot take the value here at all, with their C-locale strerror text.
# EIO from an IRQ's affinity is the kernel saying user space may not move that IRQ (a managed
# one): a refusal too (facts.irq.refuses_with_eio).
refused() {
    case "$3" in
    *"Invalid argument"* | *"Operation not supported"* | *"Unknown error 524"*) REFUSED=1 ;;
    esac
    case "$3" in *"Input/output error"*) irq_file "$1" && REFUSED=1 ;; esac
    ERR="$1: the kernel refused $(printf '%s' "$2" | awk "$REPR") ($3)."
    return 1
}

# strerror ERRNO: rendered by sh_engine from the C library's texts (os.strerror).

# Fault injection on a snapshot, for tune's own tests (tests/engines/test_faults.py, where
# the Python engine gets the same faults): `/.tune-emulate/fault` holding "N fail|ignore|crash"
# makes the N-th write of this script (0-based: set_attr, put_file, delete_file, a command but
# a dry run) fail, report success without writing, or kill the script before it writes.
WRITES=0
# Status 0 and RC set: the write is done with (RC 1: failed, ERR says why; RC 0: skipped).
injected() {
    [ -n "$EMU" ] && [ -f "$R/.tune-emulate/fault" ] || return 1
    WRITES=$((WRITES + 1))
    read -r at how <"$R/.tune-emulate/fault" || return 1
    [ "$((WRITES - 1))" = "$at" ] || return 1
    case "$how" in
    ignore) RC=0; return 0 ;;
    crash) kill -KILL $$ ;;
    esac
    ERR="injected: the write failed (Input/output error)."
    RC=1
}

# Whether $1 is an IRQ's smp_affinity or smp_affinity_list (facts.irq.refuses_with_eio), and
# its file name in $IRQ_FILE.
irq_file() {
    irqn=${1#/proc/irq/}; irqn=${irqn%%/*}; IRQ_FILE=
    case "$irqn" in "" | *[!0-9]*) return 1 ;; esac
    case "$1" in "/proc/irq/$irqn/smp_affinity" | "/proc/irq/$irqn/smp_affinity_list") ;;
    *) return 1 ;;
    esac
    IRQ_FILE=${1##*/}
}
# Whether $1 is an IRQ's smp_affinity_list (facts.irq.is_affinity_list).
affinity_list() { irq_file "$1" && [ "$IRQ_FILE" = smp_affinity_list ]; }

# What an IRQ's smp_affinity_list prints after V is written (facts.irq.kernel_cpulist): the
# CPUs in ascending ranges; exit 2 for what bitmap_parselist refuses (EINVAL), 3 for a CPU at
# or past C, the possible CPUs (ERANGE).
CPULIST='
BEGIN {
  v = ENVIRON["V"]; gsub(/^[ \t\n\r\f\v]+|[ \t\n\r\f\v]+$/, "", v)
  if (v == "") exit 2
  n = split(v, parts, ","); top = -1; bad = 0; past = 0
  for (i = 1; i <= n; i++) {
    p = parts[i]; gsub(/^[ \t\n\r\f\v]+|[ \t\n\r\f\v]+$/, "", p)
    if (p ~ /^[0-9]+$/) { a = p + 0; b = a }
    else if (p ~ /^[0-9]+-[0-9]+$/) { split(p, r, "-"); a = r[1] + 0; b = r[2] + 0 }
    else { bad = 1; continue }
    if (b < a) { bad = 1; continue }
    if (ENVIRON["C"] != "" && b >= ENVIRON["C"] + 0) past = 1
    ranges[i] = a " " b; if (b > top) top = b }
  if (bad) exit 2
  if (past) exit 3
  for (i = 1; i <= n; i++) { split(ranges[i], r, " "); for (c = r[1]; c <= r[2]; c++) on[c] = 1 }
  out = ""; c = 0
  while (c <= top) {
    if (!(c in on)) { c++; continue }
    s = c; while ((c + 1) in on) c++
    out = out (out == "" ? "" : ",") (s == c ? s : s "-" c); c++ }
  print out }'

emu_affinity() {
    c=$(awk -F, '{ n = $NF; sub(/.*-/, "", n); if (n ~ /^[0-9]+$/) print n + 1 }' \
        "$R/sys/devices/system/cpu/possible" 2>/dev/null)
    new=$(V="$2" C="$c" awk "$CPULIST")
    case $? in
    0) return 0 ;;
    3) refused "$1" "$2" "Numerical result out of range" ;;
    *) refused "$1" "$2" "Invalid argument" ;;
    esac
}

set_attr() {
    f="$R$1"
    REFUSED=
    injected && return $RC
    abnormal "$1" && return 1
    # A link as the attribute's own name is never the kernel's (hosts.base.link_at_attribute).
    [ -L "$f" ] && { ERR="$1: cannot open for writing (a symbolic link, which no kernel attribute is)."; return 1; }
    if [ -n "$EMU" ]; then
        [ -f "$f" ] || { ERR="$1: cannot open for writing (No such file or directory)."; return 1; }
        writable "$1" || { ERR="$1: cannot open for writing (Permission denied)."; return 1; }
        m="$R/.tune-emulate/refuses$1"
        [ -f "$m" ] && { refused "$1" "$2" "$(strerror "$(tr -d ' \n' <"$m")")"; return 1; }
        if affinity_list "$1"; then emu_affinity "$1" "$2" || return 1
        elif ! plain_ktext "$f" "$2"; then
            new=$(V="$2" awk "$KTEXT" "$f") || { refused "$1" "$2" "Invalid argument"; return 1; }
        fi
        printf '%s\n' "$new" >"$f" || { ERR="$1: cannot write."; return 1; }
    else
        [ -e "$f" ] || { ERR="$1: cannot open for writing (No such file or directory)."; return 1; }
        # tee, not the shell's printf: dash reports every failed write as "I/O error", tee
        # gives the kernel's errno. One short value arrives in one write(2).
        out=$(printf '%s' "$2" | tee "$f" 2>&1 >/dev/null) && return 0
        refused "$1" "$2" "${out##*: }"
    fi
}

# $4: the step's seq, inside a run: the directories about to be created are journaled first.
# The bytes go to a fresh name beside the file (steps.temporary and mktemp's ten characters),
# never to one a link may wait at: a directory another user can write (an LXC config's, in
# their home) is theirs to fill with links, and the fixed name had root write and chmod the
# file a link there named. -T: a link (or a directory) at the file's own name is replaced, never
# moved into (a link to /etc/cron.d got root's file there). The directories it makes are 0755
# whatever the umask (the library's umask 022, and -m for the last one).
put_file() {
    abnormal "$1" && return 1
    f="$R$1"; d="${f%/*}"; t=
    # A record that could not be journaled keeps rec's reason (a full device) in ERR.
    [ -z "${4:-}" ] || creates "$4" "${1%/*}" || return 1
    injected && return $RC
    if { [ -d "$d" ] || mkdir -p -m 755 "$d"; } &&
        t=$(mktemp -u "$d/.${f##*/}.tune-new.XXXXXXXXXX") && exclusive "$t" "$2" "$3" &&
        mv -fT "$t" "$f" && fsync "$d"
    then return 0; fi
    [ -z "$t" ] || rm -f "$t"; ERR="$1: cannot write."; return 1
}

# File $1 created (0600 until chmod makes it mode $2, before any byte), the printf format $3
# written to it and synced, or status 1. noclobber makes `>` O_EXCL for a name not there (dash,
# bash and busybox ash alike; for an existing non-regular file it opens it, which mktemp's
# fresh name rules out). Mode, bytes and sync go through the open file (/proc/self/fd/1),
# never the name, which the directory's owner can swap for a link meanwhile.
exclusive() {
    umask 077; set -C
    { chmod "$2" /proc/self/fd/1 && printf "$3" && fsync /proc/self/fd/1; } >"$1"
    s=$?; set +C; umask 022; return $s
}

# untemp PATH...: the temporary files of writes of PATHs that a crash or a signal cut short,
# removed (apply.tidy): the Python engine's fixed name (steps.temporary), and put_file's
# fresh ones, by the shell's own glob (no process when there is none, a link removed as
# a link, never followed).
untemp() {
    for p; do
        abnormal "$p" && continue
        q="$R${p%/*}/.${p##*/}.tune-new"
        set +f; set -- "$q" "$q".??????????; set -f
        for x; do if [ -e "$x" ] || [ -h "$x" ]; then rm -f -- "$x"; fi; done
    done
    return 0
}

# Journal.creates: step $1's record of the directories of $2 that do not exist, deepest first.
creates() {
    m=; e="$2"
    while [ -n "$e" ] && [ ! -e "$R$e" ] && [ ! -h "$R$e" ]; do
        m="$m,\"$(jstr "$e")\""; MADE="$MADE$1 $e
"; e="${e%/*}"
    done
    [ -z "$m" ] || rec "{\"type\":\"mkdir\",\"seq\":$1,\"paths\":[${m#,}]}"
}

# apply.tidy after step $1's restore: its temporary files (tidy_N), then the directories it
# created, each only while empty; a path that is not absolute and normal (a journal's, damaged)
# is none of the host's, as `checked` refuses it in Python.
tidy() {
    "tidy_$1"
    printf '%s' "$MADE" | while read -r s e; do
        [ "$s" != "$1" ] || abnormal "$e" || rmdir "$R$e" 2>/dev/null
    done
    return 0
}

delete_file() {
    injected && return $RC
    abnormal "$1" && return 1
    rm -f "$R$1" && fsync "${R}${1%/*}/" || { ERR="$1: cannot delete."; return 1; }
}

u8() { od -An -tu1 -j "$2" -N1 "$1" | tr -d ' \n'; }
u16() { set -- $(od -An -tu1 -j "$2" -N2 "$1"); [ $# -eq 2 ] && echo $(($1 + 256 * $2)); }

# Whether the module list $1 (modules.dep or modules.builtin: a module's path first on each
# line) names module $2 (facts.modules.module_name).
lists_module() {
    [ -f "$1" ] && M="$2" awk -F: '{ n = $1; sub(/.*\//, "", n); sub(/\.ko.*/, "", n)
        gsub(/-/, "_", n); if (n == ENVIRON["M"]) f = 1 } END { exit !f }' "$1"
}

# As kmod's modprobe: a module compiled in (modules.builtin) loads with success and nothing to
# do, and refuses removal.
emu_modprobe() {
    rm=; dry=; name=; typed=
    for a; do
        case "$a" in
        -r | --remove) rm=1 ;;
        -n | --dry-run) dry=1 ;;
        -*) ;;
        *) [ -n "$name" ] || { typed=$a; name=$(printf '%s' "$a" | tr - _); } ;;
        esac
    done
    [ -n "$name" ] || { echo "modprobe: ERROR: missing module name."; return 1; }
    release=$(cat "$R/proc/sys/kernel/osrelease" 2>/dev/null | tr -d ' \n')
    dir="$R/lib/modules/$release"
    if lists_module "$dir/modules.builtin" "$name"; then
        [ -z "$rm" ] || { echo "modprobe: FATAL: Module $name is builtin."; return 1; }
        return 0
    fi
    if [ -f "$dir/modules.dep" ] && ! lists_module "$dir/modules.dep" "$name"; then
        echo "modprobe: FATAL: Module $typed not found in directory /lib/modules/$release"; return 1
    fi
    [ -n "$dry" ] && return 0
    mods="$R/proc/modules"
    line=$(M="$name" awk '$1 == ENVIRON["M"] { print; exit }' "$mods" 2>/dev/null)
    if [ -n "$rm" ]; then
        [ -n "$line" ] || { echo "modprobe: FATAL: Module $name is not in kernel."; return 1; }
        set -- $line
        [ "$3" = 0 ] || { echo "modprobe: FATAL: Module $name is in use."; return 1; }
        rest=$(M="$name" awk '$1 == ENVIRON["M"] && !d { d = 1; next } { print }' "$mods"; printf x)
        printf '%s' "${rest%x}" >"$mods"
        rm -rf "$R/sys/module/$name"
        return 0
    fi
    [ -n "$line" ] && return 0
    if [ -f "$R/.tune-emulate/modprobe/$name" ]; then cat "$R/.tune-emulate/modprobe/$name"; return 1; fi
    rest=$(cat "$mods" 2>/dev/null; printf x)
    printf '%s 16384 0 - Live 0x0000000000000000\n%s' "$name" "${rest%x}" >"$mods"
    seen=
    for p; do
        # Every word after the name is a parameter, spaces and all (an argv, never split).
        case "$p" in -*) continue ;; esac
        [ -n "$seen" ] || { seen=1; continue; }
        mkdir -p "$R/sys/module/$name/parameters"
        v=$(V="${p#*=}" awk "$KTEXT" </dev/null)
        printf '%s\n' "$v" >"$R/sys/module/$name/parameters/${p%%=*}"
    done
}

# The offset of the PCI Express capability in config file $1 (facts.pcie.capabilities).
exp_cap() {
    size=$(wc -c <"$1")
    st=$(u16 "$1" 6)
    [ "$size" -ge 64 ] && [ $((st & 16)) -ne 0 ] || return 1
    p=$(($(u8 "$1" 52) & 252)); lim=$size; [ "$lim" -gt 256 ] && lim=256; hops=0
    while [ "$p" -ge 64 ] && [ $((p + 2)) -le "$lim" ] && [ "$hops" -lt 48 ]; do
        if [ "$(u8 "$1" "$p")" = 16 ]; then echo "$p"; return 0; fi
        p=$(($(u8 "$1" $((p + 1))) & 252)); hops=$((hops + 1))
    done
    return 1
}

# The offset of extended capability $2 (decimal id) in config file $1, a PCI Express function's
# (facts.pcie.extended_capabilities). A loop is cut by the count of offsets there are: the
# first occurrence comes before any repeat.
ecap() {
    exp_cap "$1" >/dev/null || return 1
    size=$(wc -c <"$1"); p=256; hops=0
    while [ "$p" -ge 256 ] && [ $((p + 4)) -le "$size" ] && [ "$hops" -lt 960 ]; do
        lo=$(u16 "$1" "$p"); hi=$(u16 "$1" $((p + 2)))
        [ $((lo | hi)) -ne 0 ] && [ $((lo & hi)) -ne 65535 ] || return 1
        if [ "$lo" = "$2" ]; then echo "$p"; return 0; fi
        p=$(((hi >> 4) & 4092)); hops=$((hops + 1))
    done
    return 1
}

# `setpci -s BDF CAP_EXP+OFF.w[=VALUE[:MASK]]` or `ECAP_ACS+...`: the forms tune uses.
emu_setpci() {
    [ $# -eq 3 ] && [ "$1" = -s ] || { echo "setpci: unsupported arguments $*"; return 1; }
    case "$3" in CAP_EXP+* | ECAP_ACS+*) ;; *) echo "setpci: unsupported arguments $*"; return 1 ;; esac
    spec=$(printf '%s' "${3#*+}" | sed -n 's/^\([0-9a-fA-F]*\)\.w\(=\([0-9a-fA-F]\{1,4\}\)\(:\([0-9a-fA-F]\{1,4\}\)\)\{0,1\}\)\{0,1\}$/\1 \3 \5/p')
    [ -n "$spec" ] || { echo "setpci: unsupported arguments $*"; return 1; }
    set -- "$2" "${3%%+*}" $spec
    cfg="$R/sys/bus/pci/devices/$1/config"
    [ -f "$cfg" ] || { echo "setpci: Warning: No devices selected for \`$1'."; return 1; }
    if [ "$2" = CAP_EXP ]; then
        cap=$(exp_cap "$cfg") && [ $((cap + 20)) -le "$(wc -c <"$cfg")" ] ||
            { echo "setpci: Capability 0010 not found on $1."; return 1; }
    else
        cap=$(ecap "$cfg" 13) && [ $((cap + 8)) -le "$(wc -c <"$cfg")" ] ||
            { echo "setpci: $1: Instance #0 of Extended capability 000d not found - there are no capabilities with that id."; return 1; }
    fi
    at=$((cap + 0x$3)); old=$(u16 "$cfg" "$at")
    if [ -z "$4" ]; then printf '%04x\n' "$old"; return 0; fi
    mask=$((0x${5:-ffff}))
    new=$(((old & ~mask) | (0x$4 & mask)))
    printf "\\$(printf %03o $((new & 255)))\\$(printf %03o $(((new >> 8) & 255)))" |
        dd of="$cfg" bs=1 seek="$at" count=2 conv=notrunc 2>/dev/null
}

# The CSV of the GPU query that reads field $1 (facts.nvidia_smi.query_for): QUERY, or
# CLOCKS_QUERY for the application clocks; what a snapshot recorded, or nvidia-smi's answer.
gpu_query() {
    fields="$NVSMI_FIELDS" record="$NVSMI_RECORD"
    case "$1" in clocks.*) fields="$NVSMI_CLOCK_FIELDS" record="$NVSMI_CLOCK_RECORD" ;; esac
    if [ -n "$EMU" ]; then
        [ "$(cat "$R$record/status" 2>/dev/null)" = 0 ] || return 1
        cat "$R$record/stdout"
    else
        nvidia-smi --query-gpu="$fields" --format=csv 2>/dev/null
    fi
}

# The start of each awk program on the query's CSV: col[NAME] is the column of the field NAME,
# from the header line (facts.nvidia_smi.field_names: `power.limit [W]`, its unit cut).
GPU_COLUMNS='
BEGIN { FS = ", "; OFS = ", " }
NR == 1 { for (i = 1; i <= NF; i++) { n = $i; sub(/ \[.*/, "", n); col[n] = i } }'

# GPU B's field F in the query (facts.nvidia_smi.value_of): by the header's names, units cut,
# watts as numbers (%g, as Python's); a pair (clocks.applications: its .memory and .graphics)
# as MEMORY,GRAPHICS; status 1 for no such GPU or a bracketed value.
GPU_VALUE="$GPU_COLUMNS"'
function cell(name,  c, v) {
  c = col[name]
  if (!c || $c ~ /^\[/) exit 1
  v = $c; sub(/ (W|MHz|MiB|%)$/, "", v)
  if (name ~ /^power\.(limit|default_limit|min_limit|max_limit)$/ && v ~ /^[0-9]+(\.[0-9]+)?$/) v = sprintf("%g", v)
  return v }
NR == 1 { next }
toupper($col["pci.bus_id"]) == toupper(ENVIRON["B"]) && !seen {
  seen = 1; f = ENVIRON["F"]
  if (f ~ /^clocks\.(default_)?applications$/) v = cell(f ".memory") "," cell(f ".graphics")
  else v = cell(f)
  printf "%s", v; found = 1 }
END { exit !found }'

# nvidia-smi -i BUSID -pm 0|1 | -pl WATTS | -c MODE | -e 0|1 (emulate._nvidia_smi): that GPU's
# line of the recorded query edited, its exit statuses those of nvidia-smi's manual.
GPU_SET="$GPU_COLUMNS"'
BEGIN { st = 6 }
NR == 1 { print; next }
st == 6 && toupper($col["pci.bus_id"]) == toupper(ENVIRON["B"]) {
  c = col[ENVIRON["F"]]; v = ENVIRON["V"]
  if (!c || $c ~ /^\[/) st = 3
  else {
    if (ENVIRON["PL"] != "") {
      lo = col["power.min_limit"] ? $col["power.min_limit"] : ""; sub(/ W$/, "", lo)
      hi = col["power.max_limit"] ? $col["power.max_limit"] : ""; sub(/ W$/, "", hi)
      num = "^[0-9]+(\\.[0-9]+)?$"
      if (v !~ num || lo !~ num || hi !~ num || v + 0 < lo + 0 || v + 0 > hi + 0) v = ""
      else v = sprintf("%.2f W", v)
    }
    if (v == "") st = 2; else { $c = v; st = 0 }
  } }
{ print }
END { exit st }'

# nvidia-smi -i BUSID -ac MEM,GR | -rac (emulate._nvidia_smi): that GPU's application clocks in
# the recorded clocks query, set to M and G or (RESET) to its default application clocks.
GPU_CLOCKS_SET="$GPU_COLUMNS"'
BEGIN { st = 6 }
NR == 1 { print; next }
st == 6 && toupper($col["pci.bus_id"]) == toupper(ENVIRON["B"]) {
  m = col["clocks.applications.memory"]; g = col["clocks.applications.graphics"]
  dm = col["clocks.default_applications.memory"]; dg = col["clocks.default_applications.graphics"]
  if (!m || !g || $m ~ /^\[/ || $g ~ /^\[/) st = 3
  else if (ENVIRON["RESET"] != "") {
    if (!dm || !dg) st = 2; else { $m = $dm; $g = $dg; st = 0 } }
  else if (ENVIRON["M"] ~ /^[0-9]+$/ && ENVIRON["G"] ~ /^[0-9]+$/) {
    $m = ENVIRON["M"] " MHz"; $g = ENVIRON["G"] " MHz"; st = 0 }
  else st = 2 }
{ print }
END { exit st }'

emu_nvidia_smi_clocks() {
    f="$R$NVSMI_CLOCK_RECORD/stdout"
    if [ ! -f "$f" ]; then
        echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
        return 9
    fi
    m= g= reset=
    case "$#:$1:$3" in
    3:-i:-rac) reset=1 ;;
    4:-i:-ac) case "$4" in *,*) m="${4%%,*}" g="${4#*,}" ;; esac ;;
    *) echo "Invalid combination of input arguments: $*"; return 2 ;;
    esac
    fields=clocks.applications.memory,clocks.applications.graphics
    new=$(B="$2" M="$m" G="$g" RESET="$reset" awk "$GPU_CLOCKS_SET" "$f")
    case $? in
    0) printf '%s\n' "$new" >"$f" || return 1
        echo "Set clocks.applications.memory to $(B="$2" F=clocks.applications.memory awk "$GPU_CELL" "$f"), clocks.applications.graphics to $(B="$2" F=clocks.applications.graphics awk "$GPU_CELL" "$f") for GPU $2." ;;
    6) echo "No devices were found matching $2"; return 6 ;;
    3) echo "Setting $fields is not supported for GPU $2."; return 3 ;;
    *) echo "Invalid value '${4:-}' for $3."; return 2 ;;
    esac
}

emu_nvidia_smi() {
    case "${3:-}" in -ac | -rac) emu_nvidia_smi_clocks "$@"; return ;; esac
    f="$R$NVSMI_RECORD/stdout"
    if [ ! -f "$f" ]; then
        echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
        return 9
    fi
    field= v= pl=
    if [ $# -eq 4 ] && [ "$1" = -i ]; then
        case "$3" in
        -pm | -e)
            field=persistence_mode; [ "$3" = -e ] && field=ecc.mode.pending
            case "$4" in 0) v=Disabled ;; 1) v=Enabled ;; esac ;;
        -c) field=compute_mode
            case "$(printf '%s' "$4" | tr '[:lower:]' '[:upper:]')" in
            DEFAULT) v=Default ;; PROHIBITED) v=Prohibited ;; EXCLUSIVE_PROCESS) v=Exclusive_Process ;;
            esac ;;
        -pl) field=power.limit v="$4" pl=1 ;;
        esac
    fi
    [ -n "$field" ] || { echo "Invalid combination of input arguments: $*"; return 2; }
    new=$(B="$2" F="$field" V="$v" PL="$pl" awk "$GPU_SET" "$f")
    case $? in
    0) printf '%s\n' "$new" >"$f" || return 1
        echo "Set $field to $(B="$2" F="$field" awk "$GPU_CELL" "$f") for GPU $2." ;;
    6) echo "No devices were found matching $2"; return 6 ;;
    3) echo "Setting $field is not supported for GPU $2."; return 3 ;;
    *) echo "Invalid value '$4' for $3."; return 2 ;;
    esac
}
GPU_CELL="$GPU_COLUMNS"'
NR == 1 { next }
toupper($col["pci.bus_id"]) == toupper(ENVIRON["B"]) { printf "%s", $col[ENVIRON["F"]]; exit }'

# What a snapshot has installed (SnapshotHost.commands): the list in /.tune-emulate/commands
# when the snapshot holds one, else every command the emulation knows ($EMU_COMMANDS).
emu_has() {
    c="$R/.tune-emulate/commands"
    if [ -f "$c" ]; then grep -qxF -- "$1" "$c"; return; fi
    case " $EMU_COMMANDS " in *" $1 "*) return 0 ;; esac
    return 1
}

# grubby --update-kernel=ALL --args=W | --remove-args=NAME (emulate._grubby): every BLS entry's
# first `options` line edited as facts.cmdline.edit_entry does, every other byte kept.
EDIT_ENTRY='
function canon(n) { gsub(/-/, "_", n); return n }
{ t = $0; sub(/^[ \t\r\f\v]+/, "", t); sub(/[ \t\r\f\v]+$/, "", t); k = t; sub(/ .*/, "", k) }
done || k != "options" { print; next }
{ done = 1; n = split(substr(t, 9), w); out = ""; placed = 0
  for (i = 1; i <= n; i++) { key = w[i]; sub(/=.*/, "", key); key = canon(key)
    if (ENVIRON["G"] != "" && key == canon(ENVIRON["G"])) continue
    if (ENVIRON["S"] != "" && key == canon(ENVIRON["S"])) {
      if (!placed) out = out " " ENVIRON["W"]; placed = 1; continue }
    out = out " " w[i] }
  if (ENVIRON["S"] != "" && !placed) out = out " " ENVIRON["W"]
  print "options " substr(out, 2) }'

# Whether an entry's first `options` line uses $kernelopts (facts.cmdline.grubby_edit): RHEL 8's
# grubby then edits kernelopts in the GRUB environment block instead of the entry.
USES_KERNELOPTS='
{ t = $0; sub(/^[ \t\r\f\v]+/, "", t); k = t; sub(/ .*/, "", k) }
k == "options" { n = split(substr(t, 9), w); for (i = 1; i <= n; i++) if (w[i] == "$kernelopts") f = 1; exit }
END { exit !f }'

# /boot/grub2/grubenv with kernelopts edited as an entry's options are, rewritten as
# grub2-editenv does: header, the variables in place, `#` up to 1024 bytes.
emu_grubenv() {
    body=$(sed '/^#/d; s/^kernelopts=/options /' "$1" | G="$G" S="$S" W="$W" awk "$EDIT_ENTRY" |
        sed 's/^options /kernelopts=/'; printf x)
    body="# GRUB Environment Block
${body%x}"
    n=$(printf '%s' "$body" | wc -c)
    { printf '%s' "$body"
      if [ "$n" -lt 1024 ]; then printf "%$((1024 - n))s" '' | tr ' ' '#'; fi; } >"$1"
}

emu_grubby() {
    [ $# -eq 2 ] && [ "$1" = --update-kernel=ALL ] || { echo "grubby: unsupported arguments $*"; return 1; }
    G=; S=; W=
    case "$2" in
    --args=*) W="${2#--args=}"; S="${W%%=*}" ;;
    --remove-args=*) G="${2#--remove-args=}" ;;
    *) echo "grubby: unsupported option ${2%%=*}"; return 1 ;;
    esac
    dir="$R/boot/loader/entries"
    # One `k` printed for each entry left to grubenv's kernelopts.
    uses=$(ls -A "$dir" 2>/dev/null | while IFS= read -r e; do
        f="$dir/$e"
        case "$e" in *.conf) ;; *) continue ;; esac
        [ -f "$f" ] && [ ! -h "$f" ] || continue
        if awk "$USES_KERNELOPTS" "$f"; then echo k; continue; fi
        new=$(G="$G" S="$S" W="$W" awk "$EDIT_ENTRY" "$f"; printf x)
        new="${new%x}"
        # awk ends every line; an entry whose last line has no newline keeps it that way.
        [ -z "$(tail -c 1 "$f")" ] || new="${new%?}"
        printf '%s' "$new" >"$f" || exit 1
    done) || return 1
    if [ -n "$uses" ] && [ -f "$R/boot/grub2/grubenv" ]; then emu_grubenv "$R/boot/grub2/grubenv"; fi
}

# A container config's items as its reader takes them (facts/lxc.py `parse`), one
# "KEY<tab>VALUE" line each: S=lxc as LXC's parse_line reads it (it prints "!" and LXC's words
# for the first line LXC refuses, and stops), S=pve the main section as Proxmox reads it.
# $LXC_KEYS: LXC's key table, a prefix key with a final "*".
CONFIG_ITEMS='
function known(key,  i, n, name, k) {
  n = split(K, k, " ")
  for (i = 1; i <= n; i++) {
    name = k[i]
    if (name ~ /\*$/) {
      name = substr(name, 1, length(name) - 1)
      if (substr(key, 1, length(name)) == name) return 1
    } else if (key == name) return 1
  }
  return 0
}
S == "pve" {
  if ($0 ~ /^\[[A-Za-z][A-Za-z0-9_-]+\][ \t\r\f\v]*$/ || tolower($0) ~ /^\[pve:pending\][ \t\r\f\v]*$/) exit
  if ($0 ~ /^#/ || !match($0, /^lxc\.[a-z0-9_.-]+(:|[ \t\r\f\v]*=)/)) next
  key = substr($0, 1, RLENGTH - 1); sub(/[ \t\r\f\v]+$/, "", key)
  value = substr($0, RLENGTH + 1); sub(/^[ \t\r\f\v]+/, "", value); sub(/[ \t\r\f\v]+$/, "", value)
  print key "\t" value; next }
{
  line = $0
  if (line ~ /^[ \t\r\f]*$/) next
  sub(/^[ \t]+/, "", line)
  if (substr(line, 1, 1) == "#" || substr(line, 1, 4) != "lxc.") next
  eq = index(line, "=")
  if (!eq) { print "!Invalid configuration line: " line; exit }
  key = substr(line, 1, eq - 1); sub(/[ \t]+$/, "", key)
  value = substr(line, eq + 1); sub(/^[ \t]+/, "", value); sub(/[ \t]+$/, "", value)
  q = substr(value, 1, 1)
  if (length(value) > 1 && (q == "\"" || q == "\047") && substr(value, length(value)) == q)
    value = substr(value, 2, length(value) - 2)
  if (!known(key)) { print "!Unsupported config key \"" key "\""; exit }
  print key "\t" value }'

# The device nodes a container's `ls /dev` lists (emulate._container): $EMU_CONTAINER_DEV and
# each `lxc.mount.entry` item (CONFIG_ITEMS) that binds an existing /dev/X to dev/X.
BOUND_DEV='
BEGIN { FS = "\t" }
$1 == "lxc.mount.entry" {
  n = split($2, f, /[ \t]+/)
  if (f[1] == "") { for (i = 1; i < n; i++) f[i] = f[i + 1] }
  if (f[1] ~ /^\/dev\// && f[2] ~ /^dev\/[^\/]*$/) print f[1], substr(f[2], 5) }'

emu_container() {
    tool="$1"; shift; args="$*"; config=; syntax=lxc
    case "$tool $1" in
    "pct reboot" | "pct exec") [ $# -ge 2 ] && config="/etc/pve/lxc/$2.conf"; syntax=pve ;;
    pct*) ;;
    *) [ $# -ge 4 ] && [ "$1" = -n ] && [ "$3" = -P ] && config="$4/$2/config" ;;
    esac
    [ -n "$config" ] && ! abnormal "$config" || { echo "$tool: unsupported arguments $args"; return 1; }
    [ -f "$R$config" ] || { echo "$tool: configuration file '$config' does not exist"; return 2; }
    items=$(awk -v S="$syntax" -v K="$LXC_KEYS" "$CONFIG_ITEMS" "$R$config")
    case "$items" in *"
!"* | "!"*) echo "$tool: $2: ${items##*!}"; return 1 ;; esac
    case "$tool $1" in "pct reboot" | lxc-stop* | lxc-start*) return 0 ;; esac
    while [ $# -gt 0 ] && [ "$1" != -- ]; do shift; done
    [ $# -gt 0 ] && shift
    [ "$*" = "ls /dev" ] && [ $# -eq 2 ] || { echo "$tool: unsupported command $*"; return 1; }
    printf '%s\n' "$items" | awk "$BOUND_DEV" | {
        for d in $EMU_CONTAINER_DEV; do echo "$d"; done
        while read -r src name; do
            if [ -e "$R$src" ] || [ -h "$R$src" ]; then echo "$name"; fi
        done
    } | sort -u
}

# The `[Install]` targets of a unit file as `systemctl enable` links it: `T.wants` or
# `T.requires`, one a line, first seen first (facts.systemd.link_targets).
INSTALL_TARGETS='
{ t = $0; sub(/^[ \t]+/, "", t); sub(/[ \t]+$/, "", t) }
t ~ /^[#;]/ || t == "" { next }
t ~ /^\[.*\]$/ { s = t; next }
s == "[Install]" && match(t, /^(WantedBy|RequiredBy)[ \t]*=/) {
  k = substr(t, 1, index(t, "=") - 1); sub(/[ \t]+$/, "", k)
  n = split(substr(t, index(t, "=") + 1), w, /[ \t]+/)
  for (i = 1; i <= n; i++) if (w[i] != "") {
    d = w[i] (k == "WantedBy" ? ".wants" : ".requires"); if (!(d in seen)) { seen[d] = 1; print d } } }'

# systemctl daemon-reload (a snapshot's unit files are read as they are), try-restart (a
# step's, irqbalance's: likewise) and enable, disable, mask, unmask (emulate._unit_file, byte
# for byte). A restart is the controller's (`tune apply --restart-services`), never a step's.
emu_systemctl() {
    [ "$*" = daemon-reload ] && return 0
    case "$1" in enable | disable | mask | unmask | try-restart) [ $# -eq 2 ] ;; *) false ;; esac ||
        { echo "systemctl: unsupported arguments $*"; return 1; }
    sc_verb=$1; sc_unit=$2; sc_own="/etc/systemd/system/$2"; sc_path=
    for sc_d in $EMU_UNIT_DIRS; do
        if [ -e "$R$sc_d/$sc_unit" ] || [ -h "$R$sc_d/$sc_unit" ]; then sc_path="$sc_d/$sc_unit"; break; fi
    done
    if [ "$sc_verb" = try-restart ]; then
        [ -n "$sc_path" ] || { echo "Failed to try-restart $sc_unit: Unit $sc_unit not found."; return 5; }
        return 0
    fi
    [ -n "$sc_path" ] || { echo "Failed to $sc_verb unit: Unit file $sc_unit does not exist."; return 1; }
    sc_masked=
    if [ "$sc_path" = "$sc_own" ] && ! [ -s "$R$sc_own" ]; then sc_masked=1; fi
    case $sc_verb in
    mask)
        if [ -z "$sc_masked" ] && { [ -e "$R$sc_own" ] || [ -h "$R$sc_own" ]; }; then
            echo "Failed to mask unit: File $sc_own already exists."; return 1
        fi
        : >"$R$sc_own" ;;
    unmask) if [ -n "$sc_masked" ]; then rm -f "$R$sc_own"; fi ;;
    enable)
        [ -z "$sc_masked" ] || { echo "Failed to enable unit: Unit file $sc_own is masked."; return 1; }
        for sc_t in $(awk "$INSTALL_TARGETS" "$R$sc_path"); do
            mkdir -p "$R/etc/systemd/system/$sc_t"
            sc_l="$R/etc/systemd/system/$sc_t/$sc_unit"
            if ! [ -e "$sc_l" ] && ! [ -h "$sc_l" ]; then ln -s "../../../..$sc_path" "$sc_l"; fi
        done ;;
    disable)
        # The scripts run with globbing off (set -f).
        find "$R/etc/systemd/system" -mindepth 2 -maxdepth 2 -name "$sc_unit" \
            \( -path '*.wants/*' -o -path '*.requires/*' \) -exec rm -f {} + ;;
    esac
}

# Run the argv $2...; $1: the command as tune's messages show it (shlex.join).
run_argv() {
    shown="$1"; shift
    case " $* " in *" --dry-run "*) ;; *) injected && return $RC ;; esac
    if [ -n "$EMU" ]; then
        if ! emu_has "$1"; then
            out="$1: command not found"; false
        else
            case "$1" in
            modprobe) shift; out=$(emu_modprobe "$@" 2>&1) ;;
            setpci) shift; out=$(emu_setpci "$@" 2>&1) ;;
            nvidia-smi) shift; out=$(emu_nvidia_smi "$@" 2>&1) ;;
            grubby) shift; out=$(emu_grubby "$@" 2>&1) ;;
            pct | lxc-*) out=$(emu_container "$@" 2>&1) ;;
            systemctl) shift; out=$(emu_systemctl "$@" 2>&1) ;;
            *) out="$1: command not found"; false ;;
            esac
        fi
    else
        out=$("$@" 2>&1)
    fi
    rc=$?
    [ $rc -eq 0 ] && return 0
    ERR="\`$shown\` failed: $out"
    return 1
}

# A requirement `module`: modprobe's dry run; SAID: the first line it printed, as tune shows it.
can_load() {
    run_argv "modprobe --dry-run $1" modprobe --dry-run "$1" && return 0
    SAID=$(printf '%s\n' "$out" | sed -n '/[^[:space:]]/{s/^[[:space:]]*//;p;q;}')
    [ -n "$SAID" ] || SAID="modprobe failed"
    return 1
}

# A boot tool (update-grub, grub-reboot): run it; on a snapshot, journal it instead ($1 is the
# `deferred` record), as a local snapshot does, since it would act on this machine's boot.
boot_tool() {
    if [ -n "$EMU" ] && ! emu_has "$3"; then rec "$1"; return; fi
    shift
    run_argv "$@"
}

# The reboot `tune apply --reboot` asks for, detached: an SSH session open across a reboot can
# hang (NAT and QEMU's user networking keep the dead TCP connection open).
reboot_detached() {
    if [ -n "$EMU" ]; then emu_reboot; return; fi
    if command -v setsid >/dev/null 2>&1; then S=setsid; else S=; fi
    $S nohup sh -c 'sleep 1; systemctl reboot || reboot' </dev/null >/dev/null 2>&1 &
}

# A snapshot "boots": /proc/cmdline from tune's one-time GRUB or systemd-boot entry while it
# exists (grub-reboot or bootctl set-oneshot points the boot there), else the running line;
# files staged for the next boot under $R/.next-boot/ (a /proc/devices with a moved major)
# replace their namesakes; then, last, a new boot id (a reader that sees it sees the rest),
# also appended to /.tune-emulate/boots where that directory exists.
# `/.tune-emulate/reboot-seconds` holding N: the boot happens N seconds later, detached, so the
# session that asked returns at once and the host keeps its old boot id meanwhile, as a real
# reboot of fixed duration (benchmarks/rollout.py).
emu_reboot() {
    d="$R/.tune-emulate/reboot-seconds"
    if [ -f "$d" ]; then
        read -r n <"$d" || n=0
        (sleep "$n" && emu_boot) </dev/null >/dev/null 2>&1 9>&- &
        return 0
    fi
    emu_boot
}

emu_boot() {
    try="$R/etc/grub.d/42_tune_try"
    if [ -f "$try" ]; then
        line=$(sed -n 's/^# tune-cmdline: //p' "$try")
        printf 'BOOT_IMAGE=/vmlinuz %s\n' "$line" >"$R/proc/cmdline"
    fi
    for try in "$R"/boot/efi/loader "$R"/efi/loader "$R"/boot/loader; do
        try="$try/entries/tune-try.conf"
        if [ -f "$try" ]; then sed -n 's/^options //p' "$try" >"$R/proc/cmdline" && break; fi
    done
    if [ -d "$R/.next-boot" ]; then cp -R "$R/.next-boot/." "$R/" && rm -rf "$R/.next-boot"; fi
    id="$R/proc/sys/kernel/random/boot_id"
    cat /proc/sys/kernel/random/uuid >"$id.new" && mv -f "$id.new" "$id" || return 1
    # Each boot, for the lab's tests to count (a host must never be rebooted twice).
    if [ -d "$R/.tune-emulate" ]; then cat "$id" >>"$R/.tune-emulate/boots"; fi
}

has_command() {
    if [ -n "$EMU" ]; then emu_has "$1"; return; fi
    command -v "$1" >/dev/null 2>&1
}

# A probe's normalised reading (steps.Probe.value) on stdout; status 1 when absent.
reading() {
    if [ "$1" = gpu ]; then q=$(gpu_query "$3") || return 1; printf '%s\n' "$q" | B="$2" F="$3" awk "$GPU_VALUE"; return; fi
    f="$R$2"
    present "$2" || return 1
    case "$1" in
    text) cat "$f" ;;
    words) words_of "$f"; printf '%s' "$WS" ;;
    choice)
        s=$(tr '\n' ' ' <"$f" | sed -n 's/^[^[]*\[\([^]][^]]*\)\].*/\1/p')
        if [ -n "$s" ]; then printf '%s' "$s"; else reading words "$2" "$3"; fi ;;
    module) if M="$3" awk '$1 == ENVIRON["M"] { f = 1 } END { exit !f }' "$f"; then
            printf loaded; else printf absent; fi ;;
    mrrs) c=$(u16 "$f" "$3") || return 1; [ -n "$c" ] || return 1
        printf %s $((128 << ((c >> 12) & 7))) ;;
    bits) c=$(u16 "$f" "${3%%:*}") || return 1; [ -n "$c" ] || return 1
        printf %04x $((c & 0x${3#*:})) ;;
    esac
}

# Whether a probe's path $1 is one to read (normal) and there.
present() { ! abnormal "$1" && [ -e "$R$1" ]; }

# WS: the words of file $1, one space apart, as steps.Probe reads them. tr alone (one process,
# not two): after it the file is one line, the spaces at its ends taken off here.
words_of() { WS=$(tr -s '[:space:]' ' ' <"$1"); WS=${WS# }; WS=${WS% }; ints; }

# steps.kernel_integer in awk, `kint(WORD)`: WORD in decimal where the kernel parses it as an
# integer (base 0: `0x10` hex, `010` octal, a sign), below 2**64; any other word as it is. The
# plan reads a knob so (`normalize_words`): a file that prints `0x10` reads as 16, and a push
# that compared the word `0x10` stopped every time (exit 9). Digit by digit in decimal: awk's
# numbers are doubles, exact only below 2**53. Host text is never the shell's arithmetic.
KINT='
function kint(w,  s, d, b, i, n, a, c, v, j, out) {
  s = ""; if (w ~ /^[+-]/) { s = substr(w, 1, 1); w = substr(w, 2) }
  if (w ~ /^0[xX][0-9a-fA-F]+$/) { d = tolower(substr(w, 3)); b = 16 }
  else if (w ~ /^0[0-7]+$/) { d = substr(w, 2); b = 8 }
  else if (w ~ /^([1-9][0-9]*|0)$/) { d = w; b = 10 }
  else return s w
  sub(/^0+/, "", d)
  if (length(d) > 64) return s w
  n = 1; a[1] = 0
  for (i = 1; i <= length(d); i++) {
    c = index("0123456789abcdef", substr(d, i, 1)) - 1
    for (j = 1; j <= n; j++) { v = a[j] * b + c; a[j] = v % 10; c = int(v / 10) }
    while (c > 0) { a[++n] = c % 10; c = int(c / 10) }
  }
  out = ""; for (j = n; j >= 1; j--) out = out a[j]
  if (length(out) > 20 || (length(out) == 20 && out >= "18446744073709551616")) return s w
  return (s == "-" && out != "0" ? "-" : "") out
}
function kints(t,  n, ws, k, out) {
  n = split(t, ws, " "); out = ""
  for (k = 1; k <= n; k++) out = out (k > 1 ? " " : "") kint(ws[k])
  return out
}'
# WS (words one space apart) with its integers as kint writes them; one awk only where a word
# may be one in another notation (a sign, a leading 0), none for the decimal a kernel prints.
ints() {
    case " $WS " in *" +"* | *" -0"* | *" 0"[!\ ]*) ;; *) return 0 ;; esac
    WS=$(W="$WS" awk "$KINT"'BEGIN { printf "%s", kints(ENVIRON["W"]) }')
}

# Whether the reading is exactly $4 (text keeps trailing newlines: compare with a sentinel).
# Words (every sysctl's read-back) in this shell, not in a subshell of its own.
reads() {
    if [ "$1" = words ]; then present "$2" && words_of "$R$2" && [ "$WS" = "$4" ]; return; fi
    g=$(reading "$1" "$2" "$3"; s=$?; printf x; exit $s) || return 1
    [ "${g%x}" = "$4" ]
}
reads_absent() { ! reading "$1" "$2" "$3" >/dev/null; }
# `reads words` of many files in one awk (as_read's sysctls, one `tr` each before): status 0
# when file $1 reads as $2, $3 as $4, and so on. Status 1 when one differs, or is not there, or
# holds a byte awk and `tr` might read alike or not (outside printable ASCII): the caller then
# reads each on its own. awk reads a file from offset 0 in one read(2), as /proc/sys needs.
WORDS_ARE="$KINT"'
BEGIN {
  for (i = 2; i < ARGC; i += 2) { f = ARGV[1] ARGV[i]; w = ""
    while ((r = (getline l < f)) > 0) { if (l ~ /[^\t\r\f\v -~]/) exit 1; w = w " " l }
    close(f)
    if (r < 0) exit 1
    gsub(/[ \t\r\f\v]+/, " ", w); sub(/^ /, "", w); sub(/ $/, "", w)
    if (kints(w) != ARGV[i + 1] "") exit 1 }
  exit 0 }'
words_are() {
    n=0
    for a; do
        n=$((n + 1))
        [ $((n % 2)) -eq 0 ] || { ! abnormal "$a" && [ -f "$R$a" ]; } || return 1
    done
    awk "$WORDS_ARE" "$R" "$@"
}
# `reads text` of a one-line file ($2: the line, without its newline) and `reads words`, with
# builtins only: the check of hundreds of files a pushed run makes before its first write
# (`as_read`) forks for none of them. A \r, \v or \f that `tr` would count as a space is kept,
# so such a file reads as changed (the push stops), never as unchanged when it is not. Never
# for /proc/sys: `read` takes a byte per read(2), and a sysctl read past offset 0 is at EOF.
is_line() {
    present "$1" || return 1
    { IFS= read -r v && [ "$v" = "$2" ] && ! IFS= read -r v && [ -z "$v" ]; } <"$R$1"
}
is_words() {
    present "$1" || return 1
    want=$2; w=
    while IFS= read -r l || [ -n "$l" ]; do w="$w $l"; done <"$R$1"
    set -- $w
    WS="$*"; ints
    [ "$WS" = "$want" ]
}
# A reading as messages show it (apply.messages.show_value): Python's repr of the text (of its first
# 200 characters and its length past that: the loop below costs time quadratic in what it
# quotes, and a file can be megabytes), or "nothing (absent)".
REPR='
BEGIN { RS = "\001"; for (i = 1; i < 32; i++) code[sprintf("%c", i)] = i; code["\177"] = 127 }
{ n += (NR > 1) + length($0); if (length(s) <= 200) s = (NR > 1 ? s "\001" : "") $0 }
END {
  if (n > 200) s = substr(s, 1, 200)
  q = (index(s, "\047") && !index(s, "\"")) ? "\"" : "\047"; out = ""
  for (i = 1; i <= length(s); i++) { c = substr(s, i, 1)
    if (c == "\\" || c == q) c = "\\" c
    else if (c == "\n") c = "\\n"
    else if (c == "\t") c = "\\t"
    else if (c == "\r") c = "\\r"
    else if (c in code) c = sprintf("\\x%02x", code[c])
    out = out c }
  printf "%s%s%s", q, out, q
  if (n > 200) printf "... (%d characters)", n }'
shown() {
    g=$(reading "$1" "$2" "$3"; s=$?; printf x; exit $s) || { printf 'nothing (absent)'; return; }
    printf '%s' "${g%x}" | awk "$REPR"
}

fail() {
    trap '' TERM HUP INT
    # A signal trapped inside `exclusive` finds noclobber on and umask 077: the restores write
    # files as any write does.
    set +C; umask 022
    # Interrupted in the middle of a record: it is cut off before the failure is journaled.
    if [ -n "$RECAT" ]; then truncate -s "$RECAT" "$J" 2>/dev/null; RECAT=; JSIZE=; PEND=$KEPT; fi
    rec "{\"type\":\"failed\",\"error\":\"$(jstr "$1")\",\"at\":\"$(jstr "$AT")\"}"
    FAILS=0
    for n in $DONE; do restore_step "$n"; done
    # The files written after the last step (pending.json): best effort, as apply.execute.
    for n in ${WROTE:-}; do "unafter_$n" || :; done
    if [ "$FAILS" -eq 0 ]; then end "${FAILED_END:-rolled-back}"; else end rollback-failed; fi
    exit 3
}

restore_step() { restore_one "$1"; tidy "$1"; }

restore_one() {
    if "restored_$1"; then rec "{\"type\":\"unchanged\",\"seq\":$1}"; return; fi
    ERR=
    if "undo_$1" && "restored_$1"; then rec "{\"type\":\"restored\",\"seq\":$1}"; return; fi
    [ -n "$ERR" ] || ERR="$(unrestored_$1)"
    FAILS=$((FAILS + 1))
    rec "{\"type\":\"restore-failed\",\"seq\":$1,\"error\":\"$(jstr "$ERR")\"}"
}

# An optional step whose write the kernel refused: journaled, nothing to restore.
skip() { rec "{\"type\":\"unsupported\",\"seq\":$1,\"error\":\"$(jstr "$ERR")\"}"; }

end() { rec "{\"type\":\"end\",\"outcome\":\"$1\",\"finished\":\"$(now)\"}"; }

# tune's own directories (state, lock) are 0700 whatever the umask: nobody else plants a link
# or a journal there. tune checks who owns them (trust.check) before it starts a script.
private_dir() { [ -d "$R$1" ] || (umask 077 && mkdir -p "$R$1"); }

# The lock as apply/lock.py specifies it for both engines: a holder that is ending (a detached
# apply between its `end` record and its exit) is waited for, $LOCK_WAIT seconds at most; a run
# still going is refused with status $LOCKED, and `holder` says who has it. The holder's line:
# pid, since when (UTC), the command that took it ($HOLDER).
take_lock() {
    private_dir "${LOCK%/*}" && exec 9>>"$R$LOCK" || { ERR="$LOCK: cannot create the lock"; return 1; }
    if command -v flock >/dev/null 2>&1 && ! flock -w "$LOCK_WAIT" 9; then
        ERR="another tune run holds the lock: $(holder)"
        return "$LOCKED"
    fi
    printf '%s %s %s\n' $$ "$(now)" "$HOLDER" >"$R$LOCK"
}
holder() { head -c "$MAX_RECORD" "$R$LOCK" 2>/dev/null | head -n 1; }
# For a script run attached: the holder's line on stderr and status $LOCKED, for tune to name it.
lock_or_exit() {
    take_lock && return 0
    s=$?
    if [ "$s" -eq "$LOCKED" ]; then holder >&2; else echo "$ERR" >&2; fi
    exit "$s"
}
# Before a detached run starts: wait as take_lock waits, and refuse as lock_or_exit does.
lock_free() {
    [ -f "$R$LOCK" ] && command -v flock >/dev/null 2>&1 || return 0
    (exec 8<"$R$LOCK" && flock -w "$LOCK_WAIT" 8) && return 0
    holder >&2
    exit "$LOCKED"
}

# Wait up to $2 seconds for tune's probe results `$J.$1` (before | after): the verdict on its
# first line ("ok", or why a gate failed), then the journal records of the measurement.
await_probes() {
    V="$J.$1"; i=0
    # tune waits for the last step's `verified` before it measures: on disk now.
    flush || fail "$ERR"
    while [ ! -e "$V" ]; do
        [ "$i" -lt $(($2 * 5)) ] || fail "no probe results from tune within $2 s"
        sleep 0.2; i=$((i + 1))
    done
    JSIZE=; sed 1d "$V" >>"$J" && fsync "$J"
    v=$(head -n 1 "$V"); rm -f "$V"
    [ "$v" = ok ] || fail "$v"
}
