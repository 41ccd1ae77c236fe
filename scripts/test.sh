#!/usr/bin/env bash
# Set up .venv, then run the test suite. Extra arguments go to pytest:
#   bash scripts/test.sh -m unit      one process, no sockets (tests/unit/, under 2 minutes)
#   bash scripts/test.sh -m cluster   processes, sockets, namespaces (tests/cluster/)
#
# System packages. A few tests need Debian packages pip cannot install (linux-perf, clang,
# openssh-server and -client, slurm-wlm, munge, iptables, chromium), and some start a daemon (an sshd on
# 127.0.0.1-3, Slurm's and MUNGE's). This script installs the missing ones with apt-get, as
# root, only under CI (CI set, as .ci/run does) or when you opt in:
#   NETSTORM_TEST_SYSTEM_PACKAGES=1 bash scripts/test.sh
# Otherwise it asks nothing and installs nothing, and every test that needs a missing package
# or would start a daemon skips, naming the package and this opt-in (tests/conftest.py).
# Under the opt-in such a test runs, and fails if its package is still missing.
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
cd "$REPO"

# Debian package:the file that shows it installed (tests/conftest.py's SYSTEM_PACKAGES)
SYSTEM_PACKAGES=(linux-perf:perf clang:clang++ openssh-server:/usr/sbin/sshd openssh-client:ssh
                 slurm-wlm:/usr/sbin/slurmctld munge:/usr/sbin/munged iptables:/usr/sbin/iptables
                 chromium:/usr/bin/chromium)

opted_in() {        # the rule of tests/conftest.py's system_packages_opted_in
    local ci
    ci="$(echo "${CI:-}" | tr -d '[:space:]' | tr '[:upper:]' '[:lower:]')"
    [ "${NETSTORM_TEST_SYSTEM_PACKAGES:-}" = 1 ] || { [ -n "$ci" ] && [ "$ci" != 0 ] && [ "$ci" != false ]; }
}

missing_packages() {
    local entry probe
    for entry in "${SYSTEM_PACKAGES[@]}"; do
        probe="${entry#*:}"
        if [ "${probe:0:1}" = / ]; then [ -e "$probe" ] && continue
        else command -v "$probe" >/dev/null && continue; fi
        echo "${entry%%:*}"
    done
}

install_packages() {    # apt-get install "$@" without starting any service they bring
    local policy=/usr/sbin/policy-rc.d made="" status=0
    if [ ! -e "$policy" ]; then     # the tests start their own daemons
        printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && made=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q "$@" >/dev/null 2>&1 || \
        { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "$@" >/dev/null 2>&1; } || \
        status=$?
    if [ -n "$made" ]; then rm -f "$policy"; fi
    return "$status"
}

if opted_in; then
    mapfile -t MISSING < <(missing_packages)
    if [ "${#MISSING[@]}" -gt 0 ]; then
        if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
            echo "[setup] the tests need Debian's ${MISSING[*]}: install them as root" \
                 "(apt-get install ${MISSING[*]}); their tests fail until then"
        else
            echo "[setup] installing Debian's ${MISSING[*]} (system packages opted in)"
            install_packages "${MISSING[@]}" || echo "[setup] apt-get install ${MISSING[*]}" \
                "failed: the tests that need them will fail, naming them"
        fi
    fi
else
    echo "[setup] no system package installed and no daemon started: the tests that need" \
         "one skip (opt in: NETSTORM_TEST_SYSTEM_PACKAGES=1 bash scripts/test.sh, as root)"
fi
# Three pytest processes (pytest-xdist; tests/conftest.py groups the tests that must not run
# side by side): the cluster tests wait on timeouts and sockets as much as they compute.
# Then the tests marked `alone` (they measure this machine's rates or timing), by
# themselves. With arguments, one run: `bash scripts/test.sh -n 0` runs everything in one
# process, `-m unit` the unit tests.
if [ "$#" -gt 0 ]; then
    exec python -m pytest -q -n 3 --durations=25 "$@"
fi
status=0
python -m pytest -q -n 3 --durations=25 -m "not alone" || status=$?
python -m pytest -q -p no:xdist -m alone || status=$((status ? status : $?))
exit "$status"
