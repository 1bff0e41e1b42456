// Bounds the server library puts on time values it turns into deadlines (a steady_clock time point
// holds int64 nanoseconds: about 292 years).
#pragma once

#include <string>

namespace perfx::server {

/// The longest request timeout (SchedulerOptions::request_timeout_s, serve --timeout) and load
/// duration (LoadOptions::duration_s, bench-serve --duration) taken, in seconds: a year.
constexpr double kMaxSeconds = 365.0 * 24 * 3600;

/// Checks a time in seconds (0: no limit) against [0, kMaxSeconds], so that a deadline computed
/// from it cannot overflow. Throws perfx::Error "<name> must be 0 (no limit) to 31536000 seconds
/// (a year), got <v>" otherwise (NaN included; <v> as printf's %g writes it).
void check_seconds(const std::string& name, double v);

}  // namespace perfx::server
