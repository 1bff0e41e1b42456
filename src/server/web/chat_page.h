// The chat page served at "/": one self-contained HTML document (inline CSS and JavaScript, no
// network access besides this server's own API) compiled into the binary.
#pragma once

#include <string_view>

namespace perfx::server {

/// The page's HTML.
std::string_view chat_page_html();

}  // namespace perfx::server
