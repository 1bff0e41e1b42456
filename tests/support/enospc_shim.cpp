// A disk-full simulator for the fault-injection tests (issue 13), loaded with LD_PRELOAD:
// once PERFX_ENOSPC_AFTER_BYTES bytes have been written to regular files under the folder
// PERFX_ENOSPC_DIR (all such files of the process together), every further write to one fails
// with ENOSPC (the write that crosses the limit is cut short, as a real full disk does). Other
// files (stdout / stderr redirected to files), pipes, sockets and terminals are untouched. Covers write, writev, pwrite, pwritev and fwrite (glibc's
// stdio writes through an internal write that LD_PRELOAD cannot see, so fwrite is wrapped too).
// Without the variable it changes nothing.
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

extern "C" {

namespace {
long long g_limit = -2; /* -2: not read yet, -1: no limit */
long long g_written = 0;

long long limit_bytes() {
  if (g_limit == -2) {
    const char* s = getenv("PERFX_ENOSPC_AFTER_BYTES");
    g_limit = s && *s ? atoll(s) : -1;
  }
  return g_limit;
}

// A regular file under PERFX_ENOSPC_DIR (the "disk" that fills up).
int is_regular(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  const char* dir = getenv("PERFX_ENOSPC_DIR");
  if (!dir || !*dir) return 0;
  char link[64], path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return 0;
  path[n] = 0;
  const size_t k = strlen(dir);
  return strncmp(path, dir, k) == 0 && (path[k] == '/' || path[k] == 0);
}

/* How many of `n` bytes may go to `fd`: n when unlimited, else what is left (0: fail). */
size_t allowed(int fd, size_t n) {
  const long long lim = limit_bytes();
  if (lim < 0 || !is_regular(fd)) return n;
  const long long left = lim - __atomic_load_n(&g_written, __ATOMIC_SEQ_CST);
  if (left <= 0) return 0;
  return (long long)n < left ? n : (size_t)left;
}

void count(int fd, ssize_t r) {
  if (r > 0 && limit_bytes() >= 0 && is_regular(fd))
    __atomic_add_fetch(&g_written, r, __ATOMIC_SEQ_CST);
}

}  // namespace

ssize_t write(int fd, const void* buf, size_t n) {
  static ssize_t (*real)(int, const void*, size_t);
  if (!real) real = (ssize_t(*)(int, const void*, size_t))dlsym(RTLD_NEXT, "write");
  const size_t k = allowed(fd, n);
  if (n > 0 && k == 0) {
    errno = ENOSPC;
    return -1;
  }
  const ssize_t r = real(fd, buf, k);
  count(fd, r);
  return r;
}

ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
  static ssize_t (*real)(int, const void*, size_t, off_t);
  if (!real) real = (ssize_t(*)(int, const void*, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
  const size_t k = allowed(fd, n);
  if (n > 0 && k == 0) {
    errno = ENOSPC;
    return -1;
  }
  const ssize_t r = real(fd, buf, k, off);
  count(fd, r);
  return r;
}

ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) {
  return pwrite(fd, buf, n, off);
}

/* writev / pwritev: the first buffer alone when the limit is near (a short write is legal). */
static ssize_t vec(int fd, const struct iovec* iov, int cnt, off_t off, int positioned) {
  size_t total = 0;
  for (int i = 0; i < cnt; ++i) total += iov[i].iov_len;
  const size_t k = allowed(fd, total);
  if (total > 0 && k == 0) {
    errno = ENOSPC;
    return -1;
  }
  if (k < total) {
    size_t first = iov[0].iov_len < k ? iov[0].iov_len : k;
    for (int i = 0; i < cnt && iov[i].iov_len == 0; ++i) first = 0;
    return positioned ? pwrite(fd, iov[0].iov_base, first, off) : write(fd, iov[0].iov_base, first);
  }
  static ssize_t (*real_writev)(int, const struct iovec*, int);
  static ssize_t (*real_pwritev)(int, const struct iovec*, int, off_t);
  ssize_t r;
  if (positioned) {
    if (!real_pwritev)
      real_pwritev = (ssize_t(*)(int, const struct iovec*, int, off_t))dlsym(RTLD_NEXT, "pwritev");
    r = real_pwritev(fd, iov, cnt, off);
  } else {
    if (!real_writev)
      real_writev = (ssize_t(*)(int, const struct iovec*, int))dlsym(RTLD_NEXT, "writev");
    r = real_writev(fd, iov, cnt);
  }
  count(fd, r);
  return r;
}

ssize_t writev(int fd, const struct iovec* iov, int cnt) { return vec(fd, iov, cnt, 0, 0); }
ssize_t pwritev(int fd, const struct iovec* iov, int cnt, off_t off) {
  return vec(fd, iov, cnt, off, 1);
}

size_t fwrite(const void* p, size_t size, size_t nmemb, FILE* f) {
  static size_t (*real)(const void*, size_t, size_t, FILE*);
  if (!real) real = (size_t(*)(const void*, size_t, size_t, FILE*))dlsym(RTLD_NEXT, "fwrite");
  const int fd = fileno(f);
  const size_t n = size * nmemb;
  if (size == 0 || fd < 0) return real(p, size, nmemb, f);
  const size_t k = allowed(fd, n);
  if (k < n) {
    const size_t items = k / size;
    const size_t done = items ? real(p, size, items, f) : 0;
    count(fd, (ssize_t)(done * size));
    errno = ENOSPC;
    return done;
  }
  const size_t done = real(p, size, nmemb, f);
  count(fd, (ssize_t)(done * size));
  return done;
}

}  // extern "C"
