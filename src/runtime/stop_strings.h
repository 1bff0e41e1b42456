// Stop strings over streamed text: holds back any tail that could still become a stop string, so
// streamed output never contains (part of) a stop string. Used by Engine::generate and the server.
#pragma once

#include <string>
#include <vector>

namespace perfx {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  /// Adds newly decoded text; returns the text that is safe to emit now. After a stop string is
  /// found, stopped() is true and the returned text ends right before it.
  std::string push(const std::string& text);
  /// The held-back text (call at the end when no stop string matched).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace perfx
