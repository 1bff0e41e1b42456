#!/usr/bin/env bash
# Seventeenth session, fourth call: the scheduler now ends an outstanding step that carries more
# than a prompt chunk of prompt tokens before planning the next (session_async17c.sh: 7B at 256
# clients lost 5 % overlapped, TTFT p99 ~730 ms, with step_ids_ no longer growing; the guess is
# that arrivals during a 4,096-token step joined the step after the one already begun). The same
# serving A/B as session_async17c.sh.
#   run: command "bash tools/device/session_async17d.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
exec bash tools/device/session_async17c.sh
