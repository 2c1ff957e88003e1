# Debian packages of baton (cpack -G DEB; packaging/build-deb.sh runs it).
# Included at the end of CMakeLists.txt. Configure with
# -DCMAKE_INSTALL_PREFIX=/usr (the unit and the configuration paths are
# fixed at configure time, see CMakeLists.txt "Installing"); three packages,
# one per install() COMPONENT:
#
#   baton              (daemon)     /usr/bin/baton, /etc/baton/ (conffiles),
#                                   the systemd unit, README, docs, man pages
#   libbaton-guard1    (guard_lib)  libbaton-guard.so.1 (its SONAME) and .so.1.<minor>.<patch>
#   libbaton-guard-dev (guard_dev)  headers, libbaton-guard.a, the .so link,
#                                   baton-guard.pc
#
# Dependencies are computed by dpkg-shlibdeps (dpkg-dev) from the ELF files;
# the -dev package depends on libbaton-guard1 of the same version.
# CMake 3.25's DEB generator does not mark /etc files as conffiles by itself:
# the conffiles list is generated below from the installed configuration.

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME baton)
set(CPACK_PACKAGE_VENDOR "baton maintainers")
set(CPACK_PACKAGE_CONTACT "baton maintainers <maintainers@users.noreply.a-seed-a802cb1a.example>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
# No CPACK_PACKAGE_DESCRIPTION_SUMMARY: each package's description below
# begins with its own summary line (CPackDeb indents the other lines and
# turns an empty one into " .")
# Absolute destinations (/etc/baton) and the prefix check of CMakeLists.txt:
# install with CMAKE_INSTALL_PREFIX=/usr into a DESTDIR, as `cmake --install` does.
set(CPACK_SET_DESTDIR ON)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_STRIP_FILES ON)
# refuses a prefix other than /usr; gzips the man pages in the packages
# (the install() rule installs them as they are)
set(CPACK_PRE_BUILD_SCRIPTS ${CMAKE_CURRENT_LIST_DIR}/deb/pre-build.cmake)

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL daemon guard_lib guard_dev)
set(CPACK_COMPONENTS_GROUPING IGNORE)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE "")
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)

# baton: the daemon
set(CPACK_DEBIAN_DAEMON_PACKAGE_NAME baton)
set(CPACK_DEBIAN_DAEMON_PACKAGE_SECTION net)
# libcurl.so.4 is loaded on first use (an HTTP sink, the etcd locker), and
# libpq.so.5 likewise (a postgresql sink), so dpkg-shlibdeps sees neither
set(CPACK_DEBIAN_DAEMON_PACKAGE_RECOMMENDS "libcurl4, libpq5")
set(CPACK_DEBIAN_DAEMON_DESCRIPTION "single-active consumer gateway
baton consumes from Redis (pub/sub), MQTT, RabbitMQ, MySQL/MariaDB change
data capture and schedules, and delivers to sinks (HTTP, files, stdout),
with exactly one active replica per endpoint: the others stand by and take
over when the lease holder stops renewing it (a Redis or etcd lease with
fencing tokens).

The service is installed but neither enabled nor started: configure
/etc/baton/baton.cfg and /etc/baton/endpoints.d/, then
systemctl enable --now baton.")
# conffiles: every file installed under /etc/baton
file(GLOB _baton_endpoint_cfgs RELATIVE ${CMAKE_SOURCE_DIR}/config/endpoints.d
  ${CMAKE_SOURCE_DIR}/config/endpoints.d/*)
list(SORT _baton_endpoint_cfgs)
set(_baton_conffiles "${CMAKE_INSTALL_FULL_SYSCONFDIR}/baton/baton.cfg\n")
foreach(f IN LISTS _baton_endpoint_cfgs)
  string(APPEND _baton_conffiles "${CMAKE_INSTALL_FULL_SYSCONFDIR}/baton/endpoints.d/${f}\n")
endforeach()
file(WRITE ${CMAKE_BINARY_DIR}/deb/daemon/conffiles "${_baton_conffiles}")
foreach(s postinst postrm)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/deb/baton.${s} ${CMAKE_BINARY_DIR}/deb/daemon/${s} COPYONLY)
endforeach()
set(CPACK_DEBIAN_DAEMON_PACKAGE_CONTROL_EXTRA
  "${CMAKE_BINARY_DIR}/deb/daemon/conffiles;${CMAKE_BINARY_DIR}/deb/daemon/postinst;${CMAKE_BINARY_DIR}/deb/daemon/postrm")
set(CPACK_DEBIAN_DAEMON_PACKAGE_CONTROL_STRICT_PERMISSION ON)

# libbaton-guard1: the shared library, named after its SONAME
# (libbaton-guard.so.1, CMakeLists.txt BATON_GUARD_SOVERSION)
set(CPACK_DEBIAN_GUARD_LIB_PACKAGE_NAME libbaton-guard${BATON_GUARD_SOVERSION})
set(CPACK_DEBIAN_GUARD_LIB_PACKAGE_SECTION libs)
# the ldconfig trigger (lintian lacks-ldconfig-trigger); CMake 3.25 also
# writes a postinst/postrm calling ldconfig for a library under /usr/lib,
# which is redundant and harmless (docs/install.md, lintian tags)
configure_file(${CMAKE_CURRENT_LIST_DIR}/deb/libbaton-guard.triggers
  ${CMAKE_BINARY_DIR}/deb/guard_lib/triggers COPYONLY)
set(CPACK_DEBIAN_GUARD_LIB_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/deb/guard_lib/triggers)
# a shlibs file (only this package ships a shared object; CMake 3.25 reads
# the setting for all packages alike)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_GUARD_LIB_DESCRIPTION "lease library of the baton gateway (shared library)
libbaton-guard: ActiveGuard (one active replica, fencing tokens) and
OnceGuard (a scheduled slot runs once across replicas) on a Redis or etcd
lease, as used by the baton gateway.")

# libbaton-guard-dev: headers, static library, pkg-config
set(CPACK_DEBIAN_GUARD_DEV_PACKAGE_NAME libbaton-guard-dev)
set(CPACK_DEBIAN_GUARD_DEV_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_GUARD_DEV_DEPENDS guard_lib)
set(CPACK_DEBIAN_GUARD_DEV_PACKAGE_DEPENDS
  "libbaton-guard${BATON_GUARD_SOVERSION} (= ${PROJECT_VERSION}), libhiredis-dev, libjson-c-dev, libssl-dev")
set(CPACK_DEBIAN_GUARD_DEV_DESCRIPTION "lease library of the baton gateway (development files)
libbaton-guard: ActiveGuard (one active replica, fencing tokens) and
OnceGuard (a scheduled slot runs once across replicas) on a Redis or etcd
lease. Headers (include/baton/), the static library and baton-guard.pc.")

include(CPack)
