// Includes cpp-httplib as Debian's libcpp-httplib was built: its header declares only, the code is
// in libcpp-httplib.so, and class layouts depend on these macros (pkg-config cpp-httplib --cflags),
// so every user of httplib.h must see the same definitions.
#pragma once

#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT 1
#endif
#ifndef CPPHTTPLIB_ZLIB_SUPPORT
#define CPPHTTPLIB_ZLIB_SUPPORT 1
#endif
#ifndef CPPHTTPLIB_BROTLI_SUPPORT
#define CPPHTTPLIB_BROTLI_SUPPORT 1
#endif

#include <httplib.h>
