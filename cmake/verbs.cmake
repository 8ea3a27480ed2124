# The system's verbs headers and libraries. rdmakit and the tests build against these;
# softrdma replaces the libraries at run time (LD_LIBRARY_PATH), never at link time. Also
# installed with the CMake package, whose targets link verbs::ibverbs and verbs::rdmacm.
if(TARGET verbs::ibverbs)
  return()
endif()
find_path(VERBS_INCLUDE_DIR infiniband/verbs.h REQUIRED)
find_library(SYSTEM_IBVERBS NAMES libibverbs.so.1 ibverbs REQUIRED)
find_library(SYSTEM_RDMACM NAMES librdmacm.so.1 rdmacm REQUIRED)
get_filename_component(SYSTEM_IBVERBS_REAL ${SYSTEM_IBVERBS} REALPATH)
get_filename_component(SYSTEM_RDMACM_REAL ${SYSTEM_RDMACM} REALPATH)

add_library(verbs::ibverbs UNKNOWN IMPORTED)
set_target_properties(verbs::ibverbs PROPERTIES
  IMPORTED_LOCATION ${SYSTEM_IBVERBS}
  INTERFACE_INCLUDE_DIRECTORIES ${VERBS_INCLUDE_DIR})
add_library(verbs::rdmacm UNKNOWN IMPORTED)
set_target_properties(verbs::rdmacm PROPERTIES
  IMPORTED_LOCATION ${SYSTEM_RDMACM}
  INTERFACE_INCLUDE_DIRECTORIES ${VERBS_INCLUDE_DIR})
