# Debian packages with CPack (`cpack -G DEB` in a build configured with
# -DCMAKE_INSTALL_PREFIX=/usr): one per install component (SmbInstall.cmake)
#   smbd         the daemon, its systemd units, sysusers file and /etc/smb/smbd.toml
#   libsmb0      libsmb.so.0
#   libsmb-dev   headers, the CMake package, smb.pc, the libsmb.so link
#   smb-tools    smbctl, smb-bench
#   python3-smb  the smb package (smb, smb.torch, smb.tensorflow, smb.run) and smbrun
# Library dependencies come from dpkg-shlibdeps. tests/package/debs.sh
# builds them, unpacks them into a scratch root and uses what is there.
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_VENDOR "SMB")
set(CPACK_PACKAGE_CONTACT "SMB maintainers <smb-maintainers@example.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Soft Memory Box: an RDMA shared-memory parameter-exchange fabric")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# libsmb.so.0 is in none of the system's packages: dpkg-shlibdeps finds it
# in the build tree, and the packages that use it depend on libsmb0 through
# their component's DEPENDS (below).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS "${PROJECT_BINARY_DIR}/smb-client;${PROJECT_BINARY_DIR}/smb-engine")
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://example.invalid/smb")

set(CPACK_COMPONENTS_ALL smbd libsmb dev tools)
if(TARGET smb_python_core)
  list(APPEND CPACK_COMPONENTS_ALL python)
endif()

set(CPACK_DEBIAN_SMBD_PACKAGE_NAME smbd)
set(CPACK_DEBIAN_SMBD_PACKAGE_SECTION net)
set(CPACK_DEBIAN_SMBD_PACKAGE_CONTROL_EXTRA
    "${PROJECT_SOURCE_DIR}/deploy/debian/smbd/postinst;${PROJECT_SOURCE_DIR}/deploy/debian/smbd/postrm;${PROJECT_SOURCE_DIR}/deploy/debian/smbd/conffiles")
set(CPACK_DEBIAN_SMBD_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_LIBSMB_PACKAGE_NAME libsmb0)
set(CPACK_DEBIAN_LIBSMB_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libsmb-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME smb-tools)
set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-smb)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "python3")
set(CPACK_DEBIAN_PYTHON_PACKAGE_RECOMMENDS "python3-numpy, python3-torch")

include(CPack)
cpack_add_component(smbd DISPLAY_NAME "smbd" DESCRIPTION "Soft Memory Box memory server (smbd), as a systemd service")
cpack_add_component(libsmb DISPLAY_NAME "libsmb0" DESCRIPTION "Soft Memory Box client library and update engine")
cpack_add_component(dev DISPLAY_NAME "libsmb-dev" DESCRIPTION "Soft Memory Box client library: headers, CMake package, pkg-config file"
                    DEPENDS libsmb)
cpack_add_component(tools DISPLAY_NAME "smb-tools" DESCRIPTION "Soft Memory Box tools: smbctl, smb-bench"
                    DEPENDS libsmb)
cpack_add_component(python DISPLAY_NAME "python3-smb" DESCRIPTION "Soft Memory Box for Python: smb, smb.torch, smb.tensorflow, and the smbrun launcher"
                    DEPENDS libsmb)
