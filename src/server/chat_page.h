// The chat page the server answers GET / with (src/server/chat_page.html, compiled in by
// cmake/EmbedPage.cmake; docs/serving.md, "Chat page").
#pragma once
#include <string_view>

namespace lynx::server {

// The page's bytes, exactly as in chat_page.html.
std::string_view chat_page();
// Its Content-Security-Policy: nothing loaded from anywhere, fetches to its own origin, and
// only its own inline script and style (by SHA-256 hash) run.
std::string_view chat_page_csp();

}  // namespace lynx::server
