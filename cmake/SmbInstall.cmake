# Install rules and an exported CMake package: find_package(smb) gives smb::smb.
include(CMakePackageConfigHelpers)
install(TARGETS smb EXPORT smbTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS smbd RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/smb DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} PATTERN "*.in" EXCLUDE)
install(FILES ${PROJECT_BINARY_DIR}/include/smb/config.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/smb)
install(EXPORT smbTargets NAMESPACE smb:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/smb)
configure_package_config_file(cmake/smbConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/smbConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/smb)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/smbConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/smbConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/smbConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/smb)
