#!/usr/bin/env bash
# The man page steadq(1): made from the built binary's `--help` texts (the same texts as the
# generated reference at the end of docs/cli.md) by the test
# cli_reference::the_man_page_is_made_from_the_help_and_renders_without_warnings, which also
# renders it with `groff -man -ww` and fails on any warning. Writes
# ${CARGO_TARGET_DIR:-target}/man/steadq.1 and prints that path (for packaging: the default
# build's commands, as the .deb's binary has them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
STEADQ_REQUIRE_GROFF=1 cargo test -q --test it -- --exact \
  cli_reference::the_man_page_is_made_from_the_help_and_renders_without_warnings >&2
page=${CARGO_TARGET_DIR:-target}/man/steadq.1
[ -s "$page" ] || { echo "man.sh: $page was not made" >&2; exit 1; }
echo "$page"
