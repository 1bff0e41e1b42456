#!/usr/bin/env bash
# Probe (one short call): does a perfx child see NVIDIA's OpenCL platform when its parent has
# already initialised NVIDIA's OpenCL driver? os.system (the child inherits the parent's file
# descriptors) vs subprocess with close_fds=True; the child's inherited descriptors are listed.
#   run: command "bash tools/device/session_fdprobe.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
export PERFX_OPENCL_PLATFORM=nvidia
CMD="timeout -s KILL 60 $B/perfx run -p hi -n 2 --temp 0 --device opencl:7 </dev/null"
echo "shell: $(bash -c "$CMD" 2>&1 | head -c 200)"
python3 - "$CMD" <<'PY'
import ctypes, os, subprocess, sys
cmd = sys.argv[1]
cl = ctypes.CDLL("libOpenCL.so.1")
n = ctypes.c_uint(0)
print("parent clGetPlatformIDs:", cl.clGetPlatformIDs(0, None, ctypes.byref(n)), "platforms", n.value)
def link(f):
    try:
        return os.readlink("/proc/self/fd/" + f)
    except OSError:
        return "?"
fds = sorted(os.listdir("/proc/self/fd"), key=int)
print("parent fds:", " ".join(f + "->" + link(f) for f in fds if int(f) > 2)[:600])
r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, close_fds=True)
print("close_fds=True:", r.stderr.strip()[:200])
r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, close_fds=False)
print("close_fds=False:", r.stderr.strip()[:200])
r = subprocess.run(["bash", "-c", "ls -l /proc/$$/fd | grep -c nvidia"], capture_output=True, text=True, close_fds=False)
print("nvidia fds a child inherits (close_fds=False):", r.stdout.strip())
PY
