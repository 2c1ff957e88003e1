# CPACK_PRE_BUILD_SCRIPTS (packaging/cpack.cmake): Debian packages ship man
# pages gzip-compressed (policy 12.1; lintian uncompressed-manual-page).
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
