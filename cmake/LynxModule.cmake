# lynx_module(NAME DEPS ...): a static library from every .cc in the calling folder.
# Sources are globbed so that adding a file (a new routing policy, a new command) needs no
# edit here. include/ is the library's public interface; src/ (the layers' internal headers)
# is private: a client that needs internal headers links lynx_internal and says so.
function(lynx_module name)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  add_library(${name} STATIC ${srcs})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/include
                             PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} Threads::Threads)
endfunction()

# The internal headers (src/<layer>/*.h) for tests, benchmarks and the command line.
add_library(lynx_internal INTERFACE)
target_include_directories(lynx_internal INTERFACE ${PROJECT_SOURCE_DIR}/src)
