# SPDX-License-Identifier: Apache-2.0
# Packages (cpack -G DEB, cpack -G RPM, from the build directory), split as distributions split
# their libraries (deb name / rpm name):
#   libtutti0 / libtutti            libtutti.so.0
#   libtutti-dev / libtutti-devel   tutti.h, the .so link, pkg-config and CMake files, tutti.h(3)
#   tutti-tools                     the tutti tool (static), its bash completion and man pages
#   tutti-dkms                      the kernel module's source, built by DKMS for each kernel
#   python3-tutti                   the tutti Python package (where the Python binding is built;
#                                   a deb only: cpack-config.cmake)
# Each deb carries its copyright and changelog; libtutti0 its shlibs and symbols files and an
# ldconfig trigger. tests/packaging/check.sh builds them, runs lintian and rpmlint, checks what
# they hold, and builds the samples against them.
set(TUTTI_PACKAGE_CONTACT "tutti developers <maintainers@tutti.invalid>" CACHE STRING
    "Maintainer of the packages (name <address>): a distribution sets its own")

# The kernel module's source, as DKMS builds it: /usr/src/tutti-<version>.
set(_dkms src/tutti-${PROJECT_VERSION})
install(FILES ${PROJECT_SOURCE_DIR}/kmod/lease.c ${PROJECT_SOURCE_DIR}/kmod/nvme.c ${PROJECT_SOURCE_DIR}/kmod/tutti_nvme.h
              ${PROJECT_SOURCE_DIR}/kmod/Makefile ${PROJECT_SOURCE_DIR}/kmod/README.md
        DESTINATION ${_dkms} COMPONENT kmod)
install(FILES ${PROJECT_SOURCE_DIR}/kmod/uapi/tutti_kmod.h DESTINATION ${_dkms}/uapi COMPONENT kmod)
configure_file(${CMAKE_CURRENT_LIST_DIR}/dkms.conf.in ${PROJECT_BINARY_DIR}/dkms.conf @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/dkms.conf DESTINATION ${_dkms} COMPONENT kmod)
set(_ctl ${PROJECT_BINARY_DIR}/packaging)
configure_file(${CMAKE_CURRENT_LIST_DIR}/dkms-postinst.in ${_ctl}/kmod/postinst @ONLY
               FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
configure_file(${CMAKE_CURRENT_LIST_DIR}/dkms-prerm.in ${_ctl}/kmod/prerm @ONLY
               FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)

# libtutti0's control files: the symbols of the version map (lib/capi/abi.txt), each since the
# release of its node; an ldconfig trigger instead of maintainer scripts that call ldconfig.
file(STRINGS ${PROJECT_SOURCE_DIR}/lib/capi/abi.txt _abi REGEX "^[a-z_0-9]+@@TUTTI_")
set(_symbols "libtutti.so.${PROJECT_VERSION_MAJOR} libtutti${PROJECT_VERSION_MAJOR} #MINVER#\n")
string(APPEND _symbols "* Build-Depends-Package: libtutti-dev\n")
set(_nodes "")
foreach(line IN LISTS _abi)
  string(REGEX REPLACE "^([a-z_0-9]+)@@TUTTI_([0-9.]+)$" "\\1;\\2" parts "${line}")
  list(GET parts 0 sym)
  list(GET parts 1 node)
  list(APPEND _nodes ${node})
  string(APPEND _symbols " ${sym}@TUTTI_${node} ${node}.0\n")
endforeach()
list(REMOVE_DUPLICATES _nodes)
foreach(node IN LISTS _nodes)  # the version nodes themselves are symbols of the library
  string(APPEND _symbols " TUTTI_${node}@TUTTI_${node} ${node}.0\n")
endforeach()
file(WRITE ${_ctl}/runtime/symbols "${_symbols}")
file(WRITE ${_ctl}/runtime/triggers "activate-noawait ldconfig\n")
foreach(script postinst postrm)  # CPack would write ldconfig calls; the trigger does it
  file(WRITE ${_ctl}/runtime/${script} "#!/bin/sh\nset -e\n")
  file(CHMOD ${_ctl}/runtime/${script} PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
       WORLD_READ WORLD_EXECUTE)
endforeach()
file(WRITE ${_ctl}/runtime/lintian-overrides
     "# CPack writes maintainer scripts that call ldconfig unless a package brings its own; the\n"
     "# ldconfig trigger does that work, so libtutti's are empty.\n"
     "libtutti${PROJECT_VERSION_MAJOR}: maintainer-script-empty [postinst]\n"
     "libtutti${PROJECT_VERSION_MAJOR}: maintainer-script-empty [postrm]\n")
install(FILES ${_ctl}/runtime/lintian-overrides DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides
        RENAME libtutti${PROJECT_VERSION_MAJOR} COMPONENT runtime)

# Every deb's copyright and changelog (native package: changelog.gz), and the man pages.
configure_file(${CMAKE_CURRENT_LIST_DIR}/changelog.in ${_ctl}/changelog @ONLY)
find_program(GZIP_EXECUTABLE gzip REQUIRED)
execute_process(COMMAND ${GZIP_EXECUTABLE} -9nf ${_ctl}/changelog)
set(_components runtime dev tools kmod)
if(TARGET tutti_python)
  list(APPEND _components python)
endif()
set(_pkg_runtime libtutti${PROJECT_VERSION_MAJOR})
set(_pkg_dev libtutti-dev)
set(_pkg_tools tutti-tools)
set(_pkg_kmod tutti-dkms)
set(_pkg_python python3-tutti)
foreach(comp IN LISTS _components)
  install(FILES ${CMAKE_CURRENT_LIST_DIR}/copyright ${_ctl}/changelog.gz
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${_pkg_${comp}} COMPONENT ${comp})
endforeach()
# The SWIG interface, for users who build their own bindings.
install(FILES ${PROJECT_SOURCE_DIR}/bindings/python/tutti_c.i DESTINATION ${CMAKE_INSTALL_DATADIR}/tutti COMPONENT dev)
find_program(SCDOC_EXECUTABLE scdoc DOC "scdoc, which renders the man pages (Debian: scdoc)")
if(SCDOC_EXECUTABLE)
  set(_pages "")
  set(_man1 tutti.1 tutti-info.1 tutti-bench.1 tutti-stats.1 tutti-fsck.1)
  # The API: one page per group of functions, named after its first; every other function of
  # the group gets a symbolic link to it (its NAME line lists them), as Debian's tools turn
  # `.so` pages into links.
  set(_man3 tutti.h.3 tutti_options_create.3 tutti_runtime_open.3 tutti_runtime_register_kv.3 tutti_lookup.3
      tutti_lookup_client_open.3 tutti_batch_create.3 tutti_batch_wait_layer.3 tutti_runtime_stats.3 tutti_strerror.3)
  set(_man3_out "")
  file(MAKE_DIRECTORY ${PROJECT_BINARY_DIR}/man)
  foreach(page ${_man3})
    list(APPEND _man3_out ${PROJECT_BINARY_DIR}/man/${page}.gz)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/docs/man/${page}.scd)
    file(STRINGS ${PROJECT_SOURCE_DIR}/docs/man/${page}.scd _names REGEX "^tutti_[a-z_]+(, tutti_[a-z_]+)* - ")
    string(REGEX REPLACE " - .*" "" _names "${_names}")
    string(REPLACE ", " ";" _names "${_names}")
    foreach(name ${_names})
      if(NOT "${name}.3" STREQUAL page)
        file(CREATE_LINK ${page}.gz ${PROJECT_BINARY_DIR}/man/${name}.3.gz SYMBOLIC)
        list(APPEND _man3_out ${PROJECT_BINARY_DIR}/man/${name}.3.gz)
      endif()
    endforeach()
  endforeach()
  foreach(page ${_man1} ${_man3})
    set(out ${PROJECT_BINARY_DIR}/man/${page}.gz)
    add_custom_command(OUTPUT ${out}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/man
      COMMAND sh -c "${SCDOC_EXECUTABLE} < ${PROJECT_SOURCE_DIR}/docs/man/${page}.scd | ${GZIP_EXECUTABLE} -9n > ${out}"
      DEPENDS ${PROJECT_SOURCE_DIR}/docs/man/${page}.scd VERBATIM)
    list(APPEND _pages ${out})
  endforeach()
  add_custom_target(man ALL DEPENDS ${_pages})
  list(TRANSFORM _man1 PREPEND "${PROJECT_BINARY_DIR}/man/")
  list(TRANSFORM _man1 APPEND ".gz")
  install(FILES ${_man1} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT tools)
  install(FILES ${_man3_out} DESTINATION ${CMAKE_INSTALL_MANDIR}/man3 COMPONENT dev)
else()
  message(STATUS "scdoc not found: no man pages (Debian: apt-get install scdoc)")
endif()

set(CPACK_PACKAGE_NAME tutti)
set(CPACK_PACKAGE_VENDOR "tutti")
set(CPACK_PACKAGE_CONTACT "${TUTTI_PACKAGE_CONTACT}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)  # debug info stays in the build tree
set(CPACK_COMPONENTS_ALL ${_components})
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION "SSD-backed KV cache runtime for LLM serving - shared library
tutti keeps the prefix KV caches of long-context LLM serving on local NVMe and
streams them back into a serving engine's paged KV cache layer by layer.
This package holds the shared library.")
set(CPACK_DEBIAN_DEV_DESCRIPTION "SSD-backed KV cache runtime for LLM serving - development files
tutti keeps the prefix KV caches of long-context LLM serving on local NVMe and
streams them back into a serving engine's paged KV cache layer by layer.
This package holds the C header, the pkg-config and CMake files and tutti.h(3).")
set(CPACK_DEBIAN_TOOLS_DESCRIPTION "SSD-backed KV cache runtime for LLM serving - command-line tool
tutti keeps the prefix KV caches of long-context LLM serving on local NVMe and
streams them back into a serving engine's paged KV cache layer by layer.
This package holds the tutti tool: info, bench, stats and fsck.")
set(CPACK_DEBIAN_KMOD_DESCRIPTION "NVMe queues for tutti in user space - DKMS source
tutti_kmod gives tutti's nvme backend NVMe queue pairs of a controller that an
operator dedicates to it. This package holds the module's source, which DKMS
builds for every installed kernel.")
set(CPACK_DEBIAN_PYTHON_DESCRIPTION "SSD-backed KV cache runtime for LLM serving - Python 3 package
tutti keeps the prefix KV caches of long-context LLM serving on local NVMe and
streams them back into a serving engine's paged KV cache layer by layer.
This package holds the tutti Python package: the runtime's API, layer-wise
loads into torch models, and the vLLM connector.")
# (tutti-tools needs no libtutti0: the tool links tutti's core statically, as it reads what
# the C ABI does not export: option sources, pool records.)

# Debian
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME ${_pkg_runtime})
set(CPACK_DEBIAN_DEV_PACKAGE_NAME ${_pkg_dev})
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME ${_pkg_tools})
set(CPACK_DEBIAN_KMOD_PACKAGE_NAME ${_pkg_kmod})
set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME ${_pkg_python})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)  # liburing, libxxhash, libc, libstdc++ as dpkg-shlibdeps finds them
set(CPACK_DEBIAN_TOOLS_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_KMOD_PACKAGE_SECTION kernel)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
# The module is built for one Python and links libtutti0, which dpkg-shlibdeps cannot see
# before it is installed: the dependencies are written out.
if(TUTTI_PYTHON_VERSION)
  string(REPLACE "." ";" _py "${TUTTI_PYTHON_VERSION}")
  list(GET _py 0 _py_major)
  list(GET _py 1 _py_minor)
  math(EXPR _py_next "${_py_minor} + 1")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "libc6 (>= 2.34), libtutti${PROJECT_VERSION_MAJOR} (>= ${PROJECT_VERSION}), \
python3 (>= ${_py_major}.${_py_minor}~), python3 (<< ${_py_major}.${_py_next})")
endif()
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libtutti${PROJECT_VERSION_MAJOR} (= ${PROJECT_VERSION})")
set(CPACK_DEBIAN_KMOD_PACKAGE_DEPENDS "dkms")
set(CPACK_DEBIAN_KMOD_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA
    ${_ctl}/runtime/symbols ${_ctl}/runtime/triggers ${_ctl}/runtime/postinst ${_ctl}/runtime/postrm)
set(CPACK_DEBIAN_KMOD_PACKAGE_CONTROL_EXTRA ${_ctl}/kmod/postinst ${_ctl}/kmod/prerm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

# RPM
set(CPACK_RPM_COMPONENT_INSTALL ON)
set(CPACK_RPM_FILE_NAME RPM-DEFAULT)
# CPack has one License for every component, but the kernel module is GPL-2.0: the tag picks by
# the package's name, which the spec states before it (rpm's built-in Lua).
set(CPACK_RPM_PACKAGE_LICENSE
    "%{lua: print(rpm.expand('%{name}') == '${_pkg_kmod}' and 'GPL-2.0-only' or 'Apache-2.0')}")
set(CPACK_RPM_RUNTIME_PACKAGE_NAME libtutti)
set(CPACK_RPM_DEV_PACKAGE_NAME libtutti-devel)
set(CPACK_RPM_TOOLS_PACKAGE_NAME tutti-tools)
set(CPACK_RPM_KMOD_PACKAGE_NAME tutti-dkms)
set(CPACK_RPM_DEV_PACKAGE_REQUIRES "libtutti = ${PROJECT_VERSION}")
set(CPACK_RPM_KMOD_PACKAGE_REQUIRES "dkms")
set(CPACK_RPM_KMOD_PACKAGE_ARCHITECTURE noarch)
set(CPACK_RPM_KMOD_POST_INSTALL_SCRIPT_FILE ${_ctl}/kmod/postinst)
set(CPACK_RPM_KMOD_PRE_UNINSTALL_SCRIPT_FILE ${_ctl}/kmod/prerm)
set(CPACK_RPM_EXCLUDE_FROM_AUTO_FILELIST_ADDITION /usr/src /usr/share/man /usr/share/man/man1 /usr/share/man/man3
    /usr/share/lintian /usr/share/lintian/overrides)
set(CPACK_RPM_SPEC_MORE_DEFINE "%define packager ${TUTTI_PACKAGE_CONTACT}")
set(CPACK_RPM_RUNTIME_PACKAGE_GROUP "System Environment/Libraries")
set(CPACK_RPM_DEV_PACKAGE_GROUP "Development/Libraries")
set(CPACK_RPM_TOOLS_PACKAGE_GROUP "Applications/System")
set(CPACK_RPM_KMOD_PACKAGE_GROUP "System Environment/Kernel")
set(CPACK_RPM_PYTHON_PACKAGE_GROUP "Development/Languages")
foreach(comp RUNTIME DEV TOOLS KMOD PYTHON)  # the Debian description: its first line the summary
  string(FIND "${CPACK_DEBIAN_${comp}_DESCRIPTION}" "\n" _nl)
  string(SUBSTRING "${CPACK_DEBIAN_${comp}_DESCRIPTION}" 0 ${_nl} _summary)
  math(EXPR _nl "${_nl} + 1")
  string(SUBSTRING "${CPACK_DEBIAN_${comp}_DESCRIPTION}" ${_nl} -1 _body)
  set(CPACK_RPM_${comp}_PACKAGE_SUMMARY "${_summary}")
  set(CPACK_RPM_${comp}_PACKAGE_DESCRIPTION "${_body}")
endforeach()
# The lintian overrides are the deb's alone.
set(CPACK_RPM_RUNTIME_USER_FILELIST "%exclude /usr/share/lintian/overrides/libtutti${PROJECT_VERSION_MAJOR}")

set(CPACK_PROJECT_CONFIG_FILE ${CMAKE_CURRENT_LIST_DIR}/cpack-config.cmake)
include(CPack)
