# CPACK_PRE_BUILD_SCRIPTS (packaging/cpack.cmake), run by cpack on the
# staged files before it builds the packages.
#
# The prefix: a Debian package installs to /usr (and /etc); a build
# configured for the CMake default /usr/local would make packages that put
# everything under /usr/local.
if(NOT CPACK_PACKAGING_INSTALL_PREFIX STREQUAL "/usr")
  message(FATAL_ERROR "the Debian packages need a build configured with "
    "-DCMAKE_INSTALL_PREFIX=/usr (this one: ${CPACK_PACKAGING_INSTALL_PREFIX}); "
    "packaging/build-deb.sh does it")
endif()

# Man pages: Debian packages ship them gzip-compressed (policy 12.1;
# lintian uncompressed-manual-page).
# The install() rule installs them as they are in man/; the staging copy is
# compressed here, before cpack builds the packages (-n: no name or time
# stamp in the .gz, so the package is reproducible).
file(GLOB_RECURSE _files LIST_DIRECTORIES false "${CPACK_TEMPORARY_DIRECTORY}/*")
foreach(p IN LISTS _files)
  if(p MATCHES "/share/man/man[1-9]/[^/]+$" AND NOT p MATCHES "\\.gz$")
    execute_process(COMMAND gzip -9nf "${p}" RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "gzip ${p} failed: ${rc}")
    endif()
  endif()
endforeach()
