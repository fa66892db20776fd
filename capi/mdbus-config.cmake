# find_package(mdbus) config: imported targets mdbus::mdbus (shared) and
# mdbus::mdbus_static, found relative to this file (PREFIX/lib/cmake/mdbus/).
get_filename_component(_mdbus_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)

if(NOT TARGET mdbus::mdbus)
  add_library(mdbus::mdbus SHARED IMPORTED)
  set_target_properties(mdbus::mdbus PROPERTIES
    IMPORTED_LOCATION "${_mdbus_prefix}/lib/libmdbus.so"
    INTERFACE_INCLUDE_DIRECTORIES "${_mdbus_prefix}/include")
endif()

if(NOT TARGET mdbus::mdbus_static)
  add_library(mdbus::mdbus_static STATIC IMPORTED)
  set_target_properties(mdbus::mdbus_static PROPERTIES
    IMPORTED_LOCATION "${_mdbus_prefix}/lib/libmdbus.a"
    INTERFACE_INCLUDE_DIRECTORIES "${_mdbus_prefix}/include"
    INTERFACE_LINK_LIBRARIES "@NATIVE_LIBS_CMAKE@")
endif()

set(mdbus_FOUND TRUE)
unset(_mdbus_prefix)
