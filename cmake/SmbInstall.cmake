# Install rules and an exported CMake package: find_package(smb) gives smb::smb.
include(CMakePackageConfigHelpers)
install(TARGETS smb EXPORT smbTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS smbd RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# Installed programs find libsmb (and the Python module its directory) from
# where they are, whatever the prefix: PREFIX/bin -> PREFIX/lib/<arch>.
set_property(TARGET smbd smbctl smb-bench PROPERTY INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
if(TARGET smb-caffe)
  set_property(TARGET smb-caffe PROPERTY INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}" APPEND)
endif()

# smbd as a service (docs/operations.md): the units, the user they run as,
# and the example config (as /etc/smb/smbd.toml when the prefix is /usr).
install(FILES deploy/systemd/smbd.service deploy/systemd/smbd@.service
        DESTINATION lib/systemd/system)
install(FILES deploy/systemd/smbd.sysusers DESTINATION lib/sysusers.d RENAME smbd.conf)
install(FILES deploy/smbd.toml DESTINATION ${CMAKE_INSTALL_SYSCONFDIR}/smb)
install(FILES docs/operations.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
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
