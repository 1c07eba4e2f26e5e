# `cmake --install`: the headers, libkiln_rt and libkiln, the CLI and the
# runtime-only runner, a CMake config package (find_package(kiln) with
# kiln::runtime and kiln::compiler) and pkg-config files (kiln-runtime.pc,
# kiln.pc). The ctest install_package installs into a temporary prefix and
# builds examples/consumer against it both ways.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Installed programs find the installed libraries next to them.
set_target_properties(kiln_rt_run PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
set_target_properties(kiln_compiler PROPERTIES INSTALL_RPATH "$ORIGIN")
set_target_properties(kiln_rt PROPERTIES EXPORT_NAME runtime)
set_target_properties(kiln_compiler PROPERTIES EXPORT_NAME compiler)

install(TARGETS kiln_rt kiln_compiler EXPORT kilnTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS kiln_cli kiln_rt_run RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/kiln DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(KILN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${KILN_CMAKE_DIR} FILE kilnTargets.cmake)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/kilnConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/kilnConfig.cmake INSTALL_DESTINATION ${KILN_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/kilnConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/kilnConfig.cmake ${CMAKE_BINARY_DIR}/kilnConfigVersion.cmake
        DESTINATION ${KILN_CMAKE_DIR})

# pkg-config: paths relative to the prefix the files are installed under
# (${pcfiledir}), so a relocated prefix still works.
file(RELATIVE_PATH KILN_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
foreach(pc kiln kiln-runtime)
  configure_file(${CMAKE_SOURCE_DIR}/cmake/${pc}.pc.in ${CMAKE_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${CMAKE_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
