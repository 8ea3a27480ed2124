# rdmakit_library(NAME OBJECTS INCLUDE_DIR STATIC_EXPORT_NAME s SHARED_EXPORT_NAME n
#                 DEPENDENCIES deps... [SHARED_DEPENDENCIES deps...])
# Links the object library OBJECTS (compiled once) into NAME (static) and NAME_shared
# (lib<NAME>.so.<major>), both with INCLUDE_DIR as their public headers and DEPENDENCIES as
# public link dependencies; SHARED_DEPENDENCIES replace them for the shared one (e.g. the
# shared rdmakit under the shared rpc library). The two are installed under their export
# names in the rdmakit:: namespace.
function(rdmakit_library name objects include_dir)
  cmake_parse_arguments(ARG "" "STATIC_EXPORT_NAME;SHARED_EXPORT_NAME"
                        "DEPENDENCIES;SHARED_DEPENDENCIES" ${ARGN})
  if(NOT ARG_SHARED_DEPENDENCIES)
    set(ARG_SHARED_DEPENDENCIES ${ARG_DEPENDENCIES})
  endif()
  target_include_directories(${objects} PUBLIC $<BUILD_INTERFACE:${include_dir}>)
  target_link_libraries(${objects} PUBLIC ${ARG_DEPENDENCIES} PRIVATE rdmakit_warnings)

  add_library(${name} STATIC $<TARGET_OBJECTS:${objects}>)
  add_library(${name}_shared SHARED $<TARGET_OBJECTS:${objects}>)
  set_target_properties(${name} PROPERTIES EXPORT_NAME ${ARG_STATIC_EXPORT_NAME})
  set_target_properties(${name}_shared PROPERTIES
    EXPORT_NAME ${ARG_SHARED_EXPORT_NAME}
    OUTPUT_NAME ${name}
    VERSION ${PROJECT_VERSION}
    SOVERSION ${PROJECT_VERSION_MAJOR})
  foreach(target ${name} ${name}_shared)
    target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${include_dir}>
                               $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  endforeach()
  target_link_libraries(${name} PUBLIC ${ARG_DEPENDENCIES})
  target_link_libraries(${name}_shared PUBLIC ${ARG_SHARED_DEPENDENCIES})
  install(TARGETS ${name} ${name}_shared EXPORT rdmakit-targets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(DIRECTORY ${include_dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endfunction()
