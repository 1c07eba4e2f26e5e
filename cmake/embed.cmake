# kiln_embed_sources(OUT_VAR SYMBOL_PREFIX file...): kernel sources (.cl, .comp)
# and the C-family printer's preludes (kernels/<target>/prelude.*) embedded at
# build time as NUL-terminated C strings named
# <SYMBOL_PREFIX><file stem with non-identifier characters as '_'>, plus
# <SYMBOL_PREFIX><stem>_len (size_t, without the NUL). OUT_VAR receives the
# generated .c files, to add to a library. Declare the symbols yourself:
#   extern const char kiln_cl_gemm[]; extern const size_t kiln_cl_gemm_len;
# Re-generated when a source changes.
set(KILN_EMBED_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/embed_one.cmake)
function(kiln_embed_sources out_var prefix)
  set(outs)
  foreach(src ${ARGN})
    get_filename_component(stem ${src} NAME_WE)
    string(MAKE_C_IDENTIFIER "${prefix}${stem}" sym)
    set(out ${CMAKE_BINARY_DIR}/gen/embed/${sym}.c)
    add_custom_command(
      OUTPUT ${out}
      COMMAND ${CMAKE_COMMAND} -DSRC=${src} -DOUT=${out} -DSYM=${sym} -P ${KILN_EMBED_SCRIPT}
      DEPENDS ${src} ${KILN_EMBED_SCRIPT}
      COMMENT "Embedding ${src} as ${sym}")
    list(APPEND outs ${out})
  endforeach()
  set(${out_var} ${outs} PARENT_SCOPE)
endfunction()
