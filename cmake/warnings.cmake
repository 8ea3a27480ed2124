# Project-wide warning and sanitizer settings, applied through an interface target.
add_library(rdmakit_warnings INTERFACE)
target_compile_options(rdmakit_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
  -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
  $<$<BOOL:${RDMAKIT_WERROR}>:-Werror>)

if(RDMAKIT_SANITIZE)
  add_compile_options(-fsanitize=${RDMAKIT_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${RDMAKIT_SANITIZE})
endif()
