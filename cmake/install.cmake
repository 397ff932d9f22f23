# SPDX-License-Identifier: Apache-2.0
# Install: the library, its header, pkg-config and CMake package files, and the CLI.
include(CMakePackageConfigHelpers)
install(TARGETS tutti EXPORT tuttiTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev)
install(FILES ${PROJECT_SOURCE_DIR}/include/tutti.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
install(TARGETS tutti-cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tools)
install(FILES ${PROJECT_SOURCE_DIR}/cli/tutti.bash-completion DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
  RENAME tutti COMPONENT tools)
install(EXPORT tuttiTargets NAMESPACE tutti:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tutti COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/tuttiConfig.cmake.in
  ${PROJECT_BINARY_DIR}/tuttiConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tutti)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tuttiConfigVersion.cmake COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tuttiConfig.cmake ${PROJECT_BINARY_DIR}/tuttiConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tutti COMPONENT dev)
file(RELATIVE_PATH TUTTI_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)  # "../.." for lib
string(REGEX REPLACE "/$" "" TUTTI_PC_TO_PREFIX "${TUTTI_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/tutti.pc.in ${PROJECT_BINARY_DIR}/tutti.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/tutti.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
# The build tree as pkg-config sees it (PKG_CONFIG_PATH=<build>/pkgconfig): pkg-config prefers
# tutti-uninstalled.pc there, so the Go and Rust bindings build against this tree the way
# they build against an installed libtutti-dev.
file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/pkgconfig/tutti-uninstalled.pc CONTENT
"libdir=$<TARGET_FILE_DIR:tutti>
includedir=${PROJECT_SOURCE_DIR}/include

Name: tutti
Description: ${PROJECT_DESCRIPTION} (build tree)
Version: ${PROJECT_VERSION}
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -ltutti
Cflags: -I\${includedir}
")
