# smb_python_package(<target> SOURCE_DIR <dir> PACKAGE <smb/sub> [DEPENDS <targets>])
#
# Copies every .py under SOURCE_DIR (recursively) into the build tree's
# Python package directory ${SMB_PYTHON_BUILD_DIR}/<PACKAGE>, so that the
# build tree is importable as it is (PYTHONPATH=<build>/python), and
# installs them under ${SMB_PYTHON_INSTALL_DIR}/<PACKAGE>. Copies whose
# source is gone (a moved or deleted module) are removed at configure time:
# a stale module in the build tree would shadow the real one and hide bugs.
function(smb_python_package target)
  cmake_parse_arguments(ARG "" "SOURCE_DIR;PACKAGE" "DEPENDS" ${ARGN})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS RELATIVE ${ARG_SOURCE_DIR} ${ARG_SOURCE_DIR}/*.py)
  set(destination ${SMB_PYTHON_BUILD_DIR}/${ARG_PACKAGE})
  file(GLOB_RECURSE copies RELATIVE ${destination} ${destination}/*.py)
  foreach(copy IN LISTS copies)
    # A copy in a subdirectory this package does not have belongs to another
    # package nested in this one (smb/torch in smb): not ours to remove.
    get_filename_component(subdir ${copy} DIRECTORY)
    if(subdir AND NOT IS_DIRECTORY ${ARG_SOURCE_DIR}/${subdir})
      continue()
    endif()
    if(NOT copy IN_LIST sources AND NOT EXISTS ${ARG_SOURCE_DIR}/${copy})
      file(REMOVE ${destination}/${copy})
    endif()
  endforeach()
  set(outputs "")
  foreach(source IN LISTS sources)
    add_custom_command(OUTPUT ${destination}/${source}
      COMMAND ${CMAKE_COMMAND} -E copy_if_different ${ARG_SOURCE_DIR}/${source} ${destination}/${source}
      DEPENDS ${ARG_SOURCE_DIR}/${source})
    list(APPEND outputs ${destination}/${source})
    get_filename_component(subdir ${source} DIRECTORY)
    install(FILES ${ARG_SOURCE_DIR}/${source} DESTINATION ${SMB_PYTHON_INSTALL_DIR}/${ARG_PACKAGE}/${subdir}
            COMPONENT python)
  endforeach()
  add_custom_target(${target} ALL DEPENDS ${outputs} ${ARG_DEPENDS})
endfunction()
