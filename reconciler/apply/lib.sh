# The sh primitives of a remote tune apply (see reconciler/apply/sh_script.py): POSIX sh and
# coreutils (plus awk, sed, od, dd) only. Every profile value arrives as a quoted argument.

export LC_ALL=C
umask 022
# No pathname expansion anywhere: every path arrives whole, as tune planned it, and a word taken
# from the host (a /proc/modules line, a module parameter) is split but never globbed.
set -f
R="${TUNE_ROOT:-}"
R="${R%/}"
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
# be made in (a first apply creates /var/lib/tune/runs).
writable() { existing "$1"; [ -w "$E" ]; }
# Whether each path of $@ accepts writes, asked of all at once before `writable` asks of each:
# nothing to gather on a live kernel, where `writable` asks the kernel itself.
writable_all() { :; }

# E: $1 itself, or the nearest directory above it that exists (a variable, not a subshell's
# output: a check of hundreds of paths forks for none).
existing() {
    E="$R$1"
    while [ ! -e "$E" ] && [ ! -h "$E" ] && [ "$E" != "${E%/*}" ]; do E="${E%/*}"; done
    E="${E:-/}"
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

# A fault injected into the N-th write (tune's own tests, on a snapshot only: tests/lab.sh).
# Status 0 and RC set: the write is done with. On a live kernel nothing is injected.
injected() { return 1; }
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
set_attr() {
    f="$R$1"
    REFUSED=
    injected && return $RC
    abnormal "$1" && return 1
    # A link as the attribute's own name is never the kernel's (hosts.base.link_at_attribute).
    [ -L "$f" ] && { ERR="$1: cannot open for writing (a symbolic link, which no kernel attribute is)."; return 1; }
    write_attr "$1" "$2"
}

# Write value $2 to attribute $1 (its file: f), as the kernel takes it.
write_attr() {
    [ -e "$f" ] || { ERR="$1: cannot open for writing (No such file or directory)."; return 1; }
    # tee, not the shell's printf: dash reports every failed write as "I/O error", tee
    # gives the kernel's errno. One short value arrives in one write(2).
    out=$(printf '%s' "$2" | tee "$f" 2>&1 >/dev/null) && return 0
    refused "$1" "$2" "${out##*: }"
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

u16() { set -- $(od -An -tu1 -j "$2" -N2 "$1"); [ $# -eq 2 ] && echo $(($1 + 256 * $2)); }

# The CSV of the GPU query that reads field $1 (facts.nvidia_smi.query_for): QUERY, or
# CLOCKS_QUERY for the application clocks; what a snapshot recorded, or nvidia-smi's answer.
gpu_query() {
    fields="$NVSMI_FIELDS"
    case "$1" in clocks.*) fields="$NVSMI_CLOCK_FIELDS" ;; esac
    gpu_csv "$fields"
}
# nvidia-smi's CSV of the fields $1.
gpu_csv() { nvidia-smi --query-gpu="$1" --format=csv 2>/dev/null; }

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

# Run the argv $2...; $1: the command as tune's messages show it (shlex.join).
run_argv() {
    shown="$1"; shift
    case " $* " in *" --dry-run "*) ;; *) injected && return $RC ;; esac
    command_output "$@"
    rc=$?
    [ $rc -eq 0 ] && return 0
    ERR="\`$shown\` failed: $out"
    return 1
}
# out: what the argv $@ printed, standard output and error together; its status.
command_output() { out=$("$@" 2>&1); }

# A requirement `module`: modprobe's dry run; SAID: the first line it printed, as tune shows it.
can_load() {
    run_argv "modprobe --dry-run $1" modprobe --dry-run "$1" && return 0
    SAID=$(printf '%s\n' "$out" | sed -n '/[^[:space:]]/{s/^[[:space:]]*//;p;q;}')
    [ -n "$SAID" ] || SAID="modprobe failed"
    return 1
}

# A boot tool (update-grub, grub-reboot): run it. $1 is the `deferred` record a snapshot
# journals instead (tests/lab.sh), as a local snapshot does.
boot_tool() {
    shift
    run_argv "$@"
}

# The reboot `tune apply --reboot` asks for, detached: an SSH session open across a reboot can
# hang (NAT and QEMU's user networking keep the dead TCP connection open).
reboot_detached() {
    if command -v setsid >/dev/null 2>&1; then S=setsid; else S=; fi
    $S nohup sh -c 'sleep 1; systemctl reboot || reboot' </dev/null >/dev/null 2>&1 &
}

has_command() { command -v "$1" >/dev/null 2>&1; }

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
    module) if M="$3" awk '$1 == ENVIRON["M"] && $5 != "Loading" && $5 != "Unloading" { f = 1 } END { exit !f }' "$f"; then
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

# A snapshot under TUNE_ROOT (tune's test lab) has no kernel behind its files: the lab's own
# library, which TUNE_LAB names there (tests/lab.sh), redefines the writes and commands above to
# do to the files what a kernel and its tools would. tune never sends it; a snapshot without
# it is refused, never written as a kernel nor given this machine's commands to run.
if [ -n "$R" ]; then . "${TUNE_LAB:?TUNE_ROOT names a snapshot, and TUNE_LAB no lab library}"; fi
