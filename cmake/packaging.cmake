# `cpack -G DEB` in the build directory: one Debian package with everything `cmake --install`
# puts in place, under /usr (softrdma's libraries in /usr/lib/softrdma, beside and never over
# rdma-core's). It depends on Debian's verbs runtime and development packages: the headers
# and the CMake package need them to build against rdmakit.
set(CPACK_PACKAGE_NAME rdmakit)
set(CPACK_PACKAGE_VENDOR "rdmakit")
set(CPACK_PACKAGE_CONTACT "rdmakit maintainers <rdmakit@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "RDMA toolkit: softrdma (a software RDMA device), a C++20 verbs library, RPC, tools")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_STRIP_FILES ON)  # the build keeps its debug info; the package does not
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libc6 (>= 2.36), libstdc++6 (>= 12), libgcc-s1, libssl3, libibverbs1, librdmacm1, libibverbs-dev, librdmacm-dev")
# rdmakit-plot draws charts with matplotlib.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3, python3-matplotlib")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "softrdma runs unmodified verbs and RDMA CM programs without an RDMA NIC\n(softrdma-run PROGRAM); rdmakit is a C++20 library over verbs with a CMake\npackage and pkg-config files; the rdmakit command measures (perf, rpc-bench, kv).")
include(CPack)
