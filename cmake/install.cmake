# What `cmake --install` puts where (GNUInstallDirs under CMAKE_INSTALL_PREFIX):
#   lib/                    librdmakit{,_rpc}.{a,so.0} (rdmakit_library() in library.cmake)
#   include/rdmakit/        the public headers
#   lib/softrdma/           softrdma's drop-in libibverbs.so.1 and librdmacm.so.1, never over
#                           the system's rdma-core: softrdma-run puts them first on the path;
#                           softrdma-view, which shows the device in sysfs and /dev to the program
#   bin/                    rdmakit, rdmakit-plot, softrdma-run (finds lib/softrdma from its own location,
#                           so an installed tree can be moved)
#   lib/cmake/rdmakit/      find_package(rdmakit): rdmakit::rdmakit, rdmakit::rpc (shared),
#                           rdmakit::rdmakit_static, rdmakit::rpc_static
#   lib/pkgconfig/          rdmakit.pc, rdmakit-rpc.pc
include(CMakePackageConfigHelpers)

set(RDMAKIT_SOFTRDMA_LIBDIR ${CMAKE_INSTALL_LIBDIR}/softrdma)
install(TARGETS softrdma_ibverbs softrdma_rdmacm
        LIBRARY DESTINATION ${RDMAKIT_SOFTRDMA_LIBDIR} NAMELINK_SKIP)
install(TARGETS softrdma_view RUNTIME DESTINATION ${RDMAKIT_SOFTRDMA_LIBDIR})

# The installed softrdma-run: the library directory relative to bin/.
file(RELATIVE_PATH softrdma_from_bin ${CMAKE_INSTALL_FULL_BINDIR}
     ${CMAKE_INSTALL_PREFIX}/${RDMAKIT_SOFTRDMA_LIBDIR})
set(SOFTRDMA_LIB_DIR "$(dirname \"$(readlink -f \"$0\")\")/${softrdma_from_bin}")
configure_file(${PROJECT_SOURCE_DIR}/tools/softrdma-run.in
               ${PROJECT_BINARY_DIR}/for-install/softrdma-run @ONLY)
install(PROGRAMS ${PROJECT_BINARY_DIR}/for-install/softrdma-run
        DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS rdmakit_tool RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(PROGRAMS ${PROJECT_SOURCE_DIR}/tools/rdmakit-plot DESTINATION ${CMAKE_INSTALL_BINDIR})

set(RDMAKIT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/rdmakit)
install(EXPORT rdmakit-targets NAMESPACE rdmakit:: DESTINATION ${RDMAKIT_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/rdmakit-config.cmake.in
                              ${PROJECT_BINARY_DIR}/rdmakit-config.cmake
                              INSTALL_DESTINATION ${RDMAKIT_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/rdmakit-config-version.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/rdmakit-config.cmake
              ${PROJECT_BINARY_DIR}/rdmakit-config-version.cmake
              ${PROJECT_SOURCE_DIR}/cmake/verbs.cmake
        DESTINATION ${RDMAKIT_CMAKE_DIR})

# pkg-config files whose prefix is found from their own place, like softrdma-run's.
set(RDMAKIT_PKGCONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
file(RELATIVE_PATH prefix_from_pc ${CMAKE_INSTALL_PREFIX}/${RDMAKIT_PKGCONFIG_DIR}
     ${CMAKE_INSTALL_PREFIX})
foreach(pc rdmakit rdmakit-rpc)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${pc}.pc DESTINATION ${RDMAKIT_PKGCONFIG_DIR})
endforeach()
