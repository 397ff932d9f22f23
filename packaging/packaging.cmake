# SPDX-License-Identifier: Apache-2.0
# Packages (cpack -G DEB, cpack -G RPM, from the build directory), one per component:
#   libtutti0 / libtutti        runtime: libtutti.so.0 and the tutti tool
#   libtutti-dev / -devel       tutti.h, the .so link, pkg-config and CMake package files
#   tutti-kmod-dkms             the kernel module's source, built by DKMS for each kernel
# tests/packaging/check.sh builds them and checks what they hold.
install(FILES ${PROJECT_SOURCE_DIR}/kmod/lease.c ${PROJECT_SOURCE_DIR}/kmod/nvme.c ${PROJECT_SOURCE_DIR}/kmod/tutti_nvme.h
              ${PROJECT_SOURCE_DIR}/kmod/Makefile ${PROJECT_SOURCE_DIR}/kmod/README.md
        DESTINATION src/tutti-kmod-${PROJECT_VERSION} COMPONENT kmod)
install(FILES ${PROJECT_SOURCE_DIR}/kmod/uapi/tutti_kmod.h
        DESTINATION src/tutti-kmod-${PROJECT_VERSION}/uapi COMPONENT kmod)
configure_file(${CMAKE_CURRENT_LIST_DIR}/dkms.conf.in ${PROJECT_BINARY_DIR}/dkms.conf @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/dkms.conf DESTINATION src/tutti-kmod-${PROJECT_VERSION} COMPONENT kmod)

set(CPACK_PACKAGE_NAME tutti)
set(CPACK_PACKAGE_VENDOR "tutti")
set(CPACK_PACKAGE_CONTACT "tutti developers <tutti@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)  # debug info stays in the build tree
set(CPACK_COMPONENTS_ALL runtime dev kmod)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION "tutti: SSD-backed KV cache runtime (library and tool)")
set(CPACK_COMPONENT_DEV_DESCRIPTION "tutti: C header, pkg-config and CMake files")
set(CPACK_COMPONENT_KMOD_DESCRIPTION "tutti_kmod: NVMe queues for user space, DKMS source")
set(CPACK_COMPONENT_DEV_DEPENDS runtime)

# Debian
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libtutti${PROJECT_VERSION_MAJOR})
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libtutti-dev)
set(CPACK_DEBIAN_KMOD_PACKAGE_NAME tutti-kmod-dkms)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)  # liburing, libxxhash, libc, libstdc++ as dpkg-shlibdeps finds them
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libtutti${PROJECT_VERSION_MAJOR} (= ${PROJECT_VERSION})")
set(CPACK_DEBIAN_KMOD_PACKAGE_DEPENDS "dkms")
set(CPACK_DEBIAN_KMOD_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_KMOD_PACKAGE_CONTROL_EXTRA
    ${CMAKE_CURRENT_LIST_DIR}/deb/postinst ${CMAKE_CURRENT_LIST_DIR}/deb/prerm)

# RPM
set(CPACK_RPM_COMPONENT_INSTALL ON)
set(CPACK_RPM_FILE_NAME RPM-DEFAULT)
set(CPACK_RPM_PACKAGE_LICENSE "Apache-2.0")
set(CPACK_RPM_RUNTIME_PACKAGE_NAME libtutti)
set(CPACK_RPM_DEV_PACKAGE_NAME libtutti-devel)
set(CPACK_RPM_KMOD_PACKAGE_NAME tutti-kmod-dkms)
set(CPACK_RPM_DEV_PACKAGE_REQUIRES "libtutti = ${PROJECT_VERSION}")
set(CPACK_RPM_KMOD_PACKAGE_REQUIRES "dkms")
set(CPACK_RPM_KMOD_PACKAGE_ARCHITECTURE noarch)
set(CPACK_RPM_KMOD_POST_INSTALL_SCRIPT_FILE ${CMAKE_CURRENT_LIST_DIR}/deb/postinst)
set(CPACK_RPM_KMOD_PRE_UNINSTALL_SCRIPT_FILE ${CMAKE_CURRENT_LIST_DIR}/deb/prerm)
set(CPACK_RPM_EXCLUDE_FROM_AUTO_FILELIST_ADDITION /usr/src)

include(CPack)
