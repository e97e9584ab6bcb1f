// The chat page (see chat_page.h).
#include "server/chat_page.h"

#include "server/chat_page_data.h"  // generated: kChatPageBytes, kChatPageBytes_csp

namespace lynx::server {

std::string_view chat_page() {
  return {reinterpret_cast<const char*>(kChatPageBytes), sizeof kChatPageBytes};
}

std::string_view chat_page_csp() {
  return kChatPageBytes_csp;
}

}  // namespace lynx::server
