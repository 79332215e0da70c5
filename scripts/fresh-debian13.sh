#!/usr/bin/env bash
# A fresh Debian 13 (trixie) machine, made here with debootstrap, that runs what the README tells a
# newcomer: the fresh-machine install line, the test command, and detect/plan for vLLM 0.32.0.
#
#   sudo scripts/fresh-debian13.sh [ROOT]            # default ROOT: /var/tmp/vllm-cpu-builder-trixie
#   sudo scripts/fresh-debian13.sh ROOT -- COMMAND   # then run COMMAND in the checkout inside ROOT
#
# Needs root, debootstrap and Debian's package archive (DEBIAN_MIRROR, default deb.debian.org).
# The root is kept between runs (made once, about 5 minutes); the checkout inside it is made anew
# from this repository's HEAD every run, so what runs there is exactly what is committed.
set -euo pipefail

root=${1:-/var/tmp/vllm-cpu-builder-trixie}
shift || true
[[ ${1:-} == -- ]] && shift
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
say() { printf '\n== %s\n' "$*"; }

if [[ $(id -u) != 0 ]]; then echo "fresh-debian13: run as root (debootstrap, chroot, mount)" >&2; exit 2; fi
command -v debootstrap >/dev/null || { echo "fresh-debian13: apt-get install debootstrap" >&2; exit 2; }

if [[ ! -x $root/usr/bin/apt-get ]]; then
    say "debootstrap trixie into $root"
    debootstrap --variant=minbase --include=ca-certificates,git trixie "$root.partial" "$mirror"
    mv "$root.partial" "$root"
fi

mounts=()
cleanup() {
    for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -R "${mounts[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
for fs in proc sys dev; do
    if ! mountpoint -q "$root/$fs"; then
        mount --rbind "/$fs" "$root/$fs"
        mount --make-rslave "$root/$fs"
        mounts+=("$root/$fs")
    fi
done
cp /etc/resolv.conf "$root/etc/resolv.conf"
# The local CA certificates of this network (a TLS-inspecting proxy) as any machine here has them.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null
fi

# The install line of the README's fresh-machine paragraph, word for word.
install_line=$(grep -m1 '^apt-get install ' "$repo/README.md")
say "inside: $install_line"
chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root DEBIAN_FRONTEND=noninteractive \
    bash -euc "apt-get update -qq && ${install_line/apt-get install/apt-get install -y -qq}"

say "a clean checkout of $(git -C "$repo" rev-parse --short HEAD) at /root/vllm-cpu-builder"
rm -rf "$root/root/vllm-cpu-builder"
git clone -q "$repo" "$root/root/vllm-cpu-builder"

inside() {
    say "inside: $*"
    chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        bash -euc 'cd /root/vllm-cpu-builder && "$@"' inside "$@"
}

if (($#)); then
    inside "$@"
    exit
fi
inside cat /etc/debian_version
test_command=$(grep -m1 -A12 '^apt-get install ' "$repo/README.md" | grep -m1 '^nox -s tests')
inside bash -c "$test_command"
inside nox -s detect
inside nox -s plan -- --vllm 0.32.0 --json > "$root/root/plan.json"
python3 - "$root/root/plan.json" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
plan = json.loads(text[text.index("{"):])
compiler = plan["compiler"]
print(f"compiler: {compiler}")
steps = [step["name"] for step in plan["steps"]]
assert compiler["origin"] == "PATH" and compiler["version"].startswith("14."), compiler
assert "provision-toolchain" not in steps, steps
print("plan: g++ 14 from PATH, no provisioning step")
PY
