# The direction of imports (docs/DESIGN.md, "Layers and the direction of
# imports"), checked on every #include "..." of the C sources:
#   cmake -DROOT=<source dir> -P tests/layering.cmake
# A folder may include only the folders its row allows (its own always), so
# the shipped runtime never reaches into the compiler and ir/ never into
# lowering. Fails listing every include that breaks a rule.
cmake_minimum_required(VERSION 3.25)
set(allowed_runtime  runtime kiln kernels) # kernels/host: header-only host kernel pieces
set(allowed_ir       ir kiln kernels)
set(allowed_frontend frontend ir kiln onnx)
set(allowed_lowering lowering ir kiln)
set(allowed_targets  targets lowering ir runtime kiln)
set(allowed_compiler compiler targets lowering ir runtime kiln)
# api/: the public compiler API (include/kiln/compiler.h) over all of them.
set(allowed_api      api compiler frontend targets lowering ir runtime kiln)
set(bad "")
set(checked 0)
foreach(layer runtime ir frontend lowering targets compiler api)
  file(GLOB_RECURSE files ${ROOT}/${layer}/*.c ${ROOT}/${layer}/*.h)
  foreach(f ${files})
    file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"")
    foreach(line ${lines})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([^\"]*)\".*" "\\1" inc "${line}")
      math(EXPR checked "${checked} + 1")
      if(NOT inc MATCHES "/")
        continue() # a generated file next to the build (kiln_targets.inc)
      endif()
      string(REGEX REPLACE "/.*" "" top "${inc}")
      if(NOT top IN_LIST allowed_${layer})
        file(RELATIVE_PATH rel ${ROOT} ${f})
        string(APPEND bad "  ${rel}: #include \"${inc}\" (${layer}/ may include ${allowed_${layer}})\n")
      endif()
    endforeach()
  endforeach()
endforeach()
if(bad)
  message(FATAL_ERROR "includes against the layering:\n${bad}")
endif()
message(STATUS "layering: ${checked} includes checked, all in direction")
