# tune's test lab: a snapshot under TUNE_ROOT served as a host, where reconciler/apply/lib.sh
# sources this file (TUNE_LAB names it) after its own definitions. It redefines the writes and
# commands that a kernel and its tools answer (write_attr, command_output, gpu_csv, boot_tool,
# reboot_detached, has_command, writable, writable_all, injected) to do to the snapshot's files
# what `reconciler.hosts.emulate` does for the Python engine, so both leave byte-identical trees
# and journals (tests/engines). tune never sends it: tests/lab.py renders it, with the lists it
# shares with the Python emulation, into a file of this machine that the lab's hosts name.

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

# On a snapshot a path accepts writes by its permission bits alone, whoever runs the script
# (emulate.writable).
writable() { existing "$1"; emu_writable; }
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
writable_all() {
    [ $# -gt 0 ] || return 0
    for p; do case "$p" in *"$NL"*) return 0 ;; esac; done
    m=$(stat -L -c '%A %n' -- "$@" 2>/dev/null)
    EMU_W="$NL"
    while [ -n "$m" ]; do
        l=${m%%"$NL"*}
        case "$m" in *"$NL"*) m=${m#*"$NL"} ;; *) m= ;; esac
        case "${l%% *}" in *w*) EMU_W="$EMU_W${l#* }$NL" ;; esac
    done
}

# Fault injection on a snapshot, for tune's own tests (tests/engines/test_faults.py, where
# the Python engine gets the same faults): `/.tune-emulate/fault` holding "N fail|ignore|crash"
# makes the N-th write of this script (0-based: set_attr, put_file, delete_file, a command but
# a dry run) fail, report success without writing, or kill the script before it writes.
WRITES=0
# Status 0 and RC set: the write is done with (RC 1: failed, ERR says why; RC 0: skipped).
injected() {
    [ -f "$R/.tune-emulate/fault" ] || return 1
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

u8() { od -An -tu1 -j "$2" -N1 "$1" | tr -d ' \n'; }
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
    # A module in flight (Loading, Unloading) is not loaded: the kernel waits for it to finish,
    # then it is the one loaded, or gone and loaded anew; either way listed once, live.
    case "$line" in "") ;; *" Loading "* | *" Unloading "*) ;; *) return 0 ;; esac
    if [ -f "$R/.tune-emulate/modprobe/$name" ]; then cat "$R/.tune-emulate/modprobe/$name"; return 1; fi
    if [ -n "$line" ]; then
        rest=$(M="$name" awk '$1 != ENVIRON["M"] { print }' "$mods"; printf x)
    else
        rest=$(cat "$mods" 2>/dev/null; printf x)
    fi
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

# grubby --update-kernel=ALL [--remove-args=R] [--args=A]: the real script
# (tests/corpus/grubby/grubby-bls, /usr/sbin/grubby on Fedora and RHEL 8+; emulate._grubby is
# its model), run with bash as a copy whose fixed paths lie under the snapshot, as
# tests/grubby_oracle.py runs it; its grub2-editenv is GRUB's grub-editenv.
emu_grubby() {
    [ "${1-}" = --update-kernel=ALL ] || { echo "grubby: unsupported arguments $*"; return 1; }
    for a in "$@"; do
        case "$a" in
        --update-kernel=ALL | --args=* | --remove-args=*) ;;
        *) echo "grubby: unsupported arguments $*"; return 1 ;;
        esac
    done
    d=$(mktemp -d) || return 1
    mkdir "$d/bin" "$d/cwd" &&
        { [ -z "$GRUBBY_EDITENV" ] || ln -s "$GRUBBY_EDITENV" "$d/bin/grub2-editenv"; } &&
        sed -e "s|/etc/|$R/etc/|g; s|/boot/|$R/boot/|g; s|mountpoint -q /boot|mountpoint -q $R/boot|" \
            "$GRUBBY_BLS" >"$d/grubby" &&
        (cd "$d/cwd" && PATH="$d/bin:$PATH" bash "$d/grubby" "$@" 2>/dev/null)
    rc=$?
    rm -rf "$d"
    return $rc
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


# A write of value $2 to attribute $1 (f: its file in the snapshot) as the kernel would take
# it: what the kernel prints back (KTEXT), a refusal a `refuses` marker holds.
write_attr() {
    [ -f "$f" ] || { ERR="$1: cannot open for writing (No such file or directory)."; return 1; }
    writable "$1" || { ERR="$1: cannot open for writing (Permission denied)."; return 1; }
    m="$R/.tune-emulate/refuses$1"
    [ -f "$m" ] && { refused "$1" "$2" "$(strerror "$(tr -d ' \n' <"$m")")"; return 1; }
    if affinity_list "$1"; then emu_affinity "$1" "$2" || return 1
    elif ! plain_ktext "$f" "$2"; then
        # NULs out first, as emulate.kernel_text drops them: awk would keep one, and then the
        # $(...) around it would drop it alone, leaving the space beside it.
        new=$(tr -d '\000' <"$f" | V="$2" awk "$KTEXT") ||
            { refused "$1" "$2" "Invalid argument"; return 1; }
    fi
    printf '%s\n' "$new" >"$f" || { ERR="$1: cannot write."; return 1; }
}

# What the snapshot recorded of the GPU query of fields $1, as nvidia-smi would answer it.
gpu_csv() {
    record="$NVSMI_RECORD"
    [ "$1" != "$NVSMI_CLOCK_FIELDS" ] || record="$NVSMI_CLOCK_RECORD"
    [ "$(cat "$R$record/status" 2>/dev/null)" = 0 ] || return 1
    cat "$R$record/stdout"
}

# The commands a snapshot has, emulated on its files; any other is not found.
command_output() {
    if ! emu_has "$1"; then
        out="$1: command not found"; return 1
    fi
    case "$1" in
    modprobe) shift; out=$(emu_modprobe "$@" 2>&1) ;;
    setpci) shift; out=$(emu_setpci "$@" 2>&1) ;;
    nvidia-smi) shift; out=$(emu_nvidia_smi "$@" 2>&1) ;;
    grubby) shift; out=$(emu_grubby "$@" 2>&1) ;;
    pct | lxc-*) out=$(emu_container "$@" 2>&1) ;;
    systemctl) shift; out=$(emu_systemctl "$@" 2>&1) ;;
    *) out="$1: command not found"; false ;;
    esac
}

# A boot tool the snapshot lacks is journaled ($1: the `deferred` record) as a local snapshot
# journals it: it would act on this machine's boot.
boot_tool() {
    if ! emu_has "$3"; then rec "$1"; return; fi
    shift
    run_argv "$@"
}

reboot_detached() { emu_reboot; }

has_command() { emu_has "$1"; }
