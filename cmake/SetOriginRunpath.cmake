# cmake -DFILE=<an ELF file> -P SetOriginRunpath.cmake: its runpath becomes
# $ORIGIN (setup.py: the wheel's module and libraries find each other). A
# file with no runpath needs none (it links only system libraries).
if(NOT FILE)
  message(FATAL_ERROR "give -DFILE=<path>")
endif()
file(READ_ELF "${FILE}" RUNPATH runpath RPATH rpath)
if(runpath OR rpath)
  file(RPATH_SET FILE "${FILE}" NEW_RPATH "$ORIGIN")
endif()
