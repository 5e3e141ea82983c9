# Install rules, an exported CMake package (find_package(smb) gives
# smb::smb, and smb::engine for the update engine) and smb.pc for
# pkg-config. Every file belongs to a component,
# one per Debian package (cmake/SmbPackaging.cmake): smbd (the daemon, its
# units and config), libsmb (libsmb0), dev (libsmb-dev), tools (smb-tools:
# smbctl, smb-bench), python (python3-smb).
include(CMakePackageConfigHelpers)
install(TARGETS smb smb_engine EXPORT smbTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT libsmb NAMELINK_COMPONENT dev
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS smbd RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT smbd)
# Installed programs find libsmb (and the Python module its directory) from
# where they are, whatever the prefix: PREFIX/bin -> PREFIX/lib/<arch>.
set_property(TARGET smbd smbctl smb-bench PROPERTY INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
if(TARGET smb-caffe)
  set_property(TARGET smb-caffe PROPERTY INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}" APPEND)
endif()

# smbd as a service (docs/operations.md): the units, the user they run as,
# and the example config: /etc/smb/smbd.toml for the prefix /usr (the
# Debian packages), PREFIX/etc/smb otherwise (relative, so that
# `cmake --install --prefix` puts it under that prefix).
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(SMB_CONFIG_DESTINATION /etc/smb)
else()
  set(SMB_CONFIG_DESTINATION ${CMAKE_INSTALL_SYSCONFDIR}/smb)
endif()
install(FILES deploy/systemd/smbd.service deploy/systemd/smbd@.service
        DESTINATION lib/systemd/system COMPONENT smbd)
install(FILES deploy/systemd/smbd.sysusers DESTINATION lib/sysusers.d RENAME smbd.conf COMPONENT smbd)
install(FILES deploy/systemd/smb-repair.service DESTINATION lib/systemd/system COMPONENT tools)
install(FILES deploy/smbd.toml DESTINATION ${SMB_CONFIG_DESTINATION} COMPONENT smbd)
install(FILES docs/operations.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT smbd)
install(DIRECTORY include/smb DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev PATTERN "*.in" EXCLUDE)
install(FILES ${PROJECT_BINARY_DIR}/include/smb/config.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/smb COMPONENT dev)
install(EXPORT smbTargets NAMESPACE smb:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/smb COMPONENT dev)
configure_package_config_file(cmake/smbConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/smbConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/smb)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/smbConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/smbConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/smbConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/smb COMPONENT dev)
file(RELATIVE_PATH SMB_PC_PREFIX_FROM_PCDIR "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
configure_file(cmake/smb.pc.in ${CMAKE_CURRENT_BINARY_DIR}/smb.pc @ONLY)
configure_file(cmake/smb-engine.pc.in ${CMAKE_CURRENT_BINARY_DIR}/smb-engine.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/smb.pc ${CMAKE_CURRENT_BINARY_DIR}/smb-engine.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
