#!/usr/bin/env bash
# Extract the King James Bible from the Debian package bible-kjv-text 4.38 into .data/kjv-verses.txt
# (one verse per line: "Ge1:1 In the beginning God created the heaven and the earth.").
# Needs the packages bible-kjv-text and bible-kjv (the `bible` reader): apt-get install -y bible-kjv-text
# The raw corpus stays out of git: .data/ is listed in .git/info/exclude.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
if ! command -v bible >/dev/null 2>&1; then
    echo "the 'bible' program is missing: apt-get install -y bible-kjv-text bible-kjv" >&2
    exit 1
fi
dpkg-query -W -f='${Package} ${Version}\n' bible-kjv-text bible-kjv || true
mkdir -p .data
# -f turns pretty-printing off: one verse per line, prefixed by its reference
bible -f 'Gen1:1-Rev22:21' > .data/kjv-verses.txt
exclude="$(git rev-parse --git-common-dir)/info/exclude"
mkdir -p "$(dirname "$exclude")"
grep -qx '/.data/' "$exclude" 2>/dev/null || echo '/.data/' >> "$exclude"
wc -l -c .data/kjv-verses.txt
sha256sum .data/kjv-verses.txt
