# Module signing from the command line (docs/TRUST.md, BAD_INPUTS.md row
# 24): kiln keygen, kiln compile --sign, --verify-key for kiln run, kiln info
# and kiln-rt-run. Included from tests/cli_tests.cmake (kiln_cli_test, W, M).
set(K ${W}/sign)
add_test(NAME cli_sign_dir COMMAND ${CMAKE_COMMAND} -E rm -rf ${K})
set_tests_properties(cli_sign_dir PROPERTIES LABELS unit FIXTURES_SETUP cli_sign_dir)
add_test(NAME cli_sign_mkdir COMMAND ${CMAKE_COMMAND} -E make_directory ${K})
set_tests_properties(cli_sign_mkdir PROPERTIES LABELS unit FIXTURES_REQUIRED cli_sign_dir
                     FIXTURES_SETUP cli_sign_dir2)

foreach(who a b)
  kiln_cli_test(keygen_${who} REQUIRES cli_sign_dir2 FIXTURE cli_sign_keys FILE ${K}/${who}.pub
    CHECK "STDOUT_MATCHES=wrote [^\n]*${who}.key \\(secret, mode 0600\\) and [^\n]*${who}.pub \\(public\\); key id [0-9a-f]+"
          "STDERR_EMPTY=1"
    ARGS keygen -o ${K}/${who})
endforeach()
kiln_cli_test(keygen_no_overwrite REQUIRES cli_sign_keys RC 1
  CHECK "STDERR_HAS=a.pub: exists; kiln keygen does not overwrite keys"
  ARGS keygen -o ${K}/a)
kiln_cli_test(keygen_help CHECK "STDOUT_HAS=usage: kiln keygen -o KEYBASE" "STDERR_EMPTY=1" ARGS keygen --help)
kiln_cli_test(keygen_no_base RC 2 CHECK "STDERR_HAS=no -o KEYBASE given" ARGS keygen)

kiln_cli_test(compile_signed REQUIRES cli_sign_keys FIXTURE cli_signed_module FILE ${K}/signed.kiln
  CHECK "STDOUT_MATCHES=signed with [^\n]*a.key \\(key id [0-9a-f]+\\)" "STDERR_EMPTY=1"
  ARGS compile ${M} -o ${K}/signed.kiln --sign ${K}/a.key)
kiln_cli_test(compile_sign_needs_output RC 2 CHECK "STDERR_HAS=--sign needs -o FILE.kiln"
  ARGS compile ${M} --sign ${K}/a.key)
kiln_cli_test(compile_sign_public_key REQUIRES cli_sign_keys RC 1
  CHECK "STDERR_HAS=a.pub: is a public key; signing needs the secret key"
  ARGS compile ${M} -o ${K}/never.kiln --sign ${K}/a.pub)
kiln_cli_test(compile_sign_missing_key RC 1
  CHECK "STDERR_HAS=nokey.key: cannot open key file"
  ARGS compile ${M} -o ${K}/never.kiln --sign ${K}/nokey.key)

kiln_cli_test(run_signed_verified REQUIRES cli_signed_module
  CHECK "STDOUT_HAS=output probs: f32[1,10]" "STDERR_EMPTY=1"
  ARGS run ${K}/signed.kiln --verify-key ${K}/a.pub)
kiln_cli_test(run_signed_other_key REQUIRES cli_signed_module RC 1
  CHECK "STDERR_MATCHES=signed.kiln: refused: signed by key id [0-9a-f]+, not by the verify key \\(id [0-9a-f]+\\)"
  ARGS run ${K}/signed.kiln --verify-key ${K}/b.pub)
kiln_cli_test(run_unsigned_with_key REQUIRES "cli_module;cli_sign_keys" RC 1
  CHECK "STDERR_HAS=tiny.kiln: refused: the module is not signed"
  ARGS run ${W}/tiny.kiln --verify-key ${K}/a.pub)
kiln_cli_test(run_verify_key_on_model RC 2 CHECK "STDERR_HAS=--verify-key applies to module files"
  ARGS run ${M} --verify-key ${K}/a.pub)
kiln_cli_test(run_verify_key_missing REQUIRES cli_signed_module RC 1
  CHECK "STDERR_HAS=verify key: ${K}/none.pub: cannot open key file"
  ARGS run ${K}/signed.kiln --verify-key ${K}/none.pub)
kiln_cli_test(run_verify_key_directory REQUIRES cli_signed_module RC 1
  CHECK "STDERR_HAS=${K}: is a directory, not a key file"
  ARGS run ${K}/signed.kiln --verify-key ${K})
kiln_cli_test(run_verify_key_secret REQUIRES cli_signed_module RC 1
  CHECK "STDERR_HAS=a.key: is a secret key; a verify key is the public key"
  ARGS run ${K}/signed.kiln --verify-key ${K}/a.key)

kiln_cli_test(info_signed REQUIRES cli_signed_module
  CHECK "STDOUT_HAS=target: cpu" "STDOUT_MATCHES=signature: signed by key id [0-9a-f]+ \\(not verified"
  ARGS info ${K}/signed.kiln)
kiln_cli_test(info_signed_verified REQUIRES cli_signed_module
  CHECK "STDOUT_MATCHES=signature: signed by key id [0-9a-f]+, verified with [^\n]*a.pub"
  ARGS info ${K}/signed.kiln --verify-key ${K}/a.pub)
kiln_cli_test(info_unsigned REQUIRES cli_module
  CHECK "STDOUT_HAS=signature: none (unsigned)" "STDOUT_HAS=input image: f32[1,1,28,28]"
  ARGS info ${W}/tiny.kiln)

# One byte of the signed file changed (no checksum fixed up): the signature
# check refuses it before the parser's checksum would.
if(KILN_SH)
  add_test(NAME cli_sign_make_tampered
           # byte 2000 plus one (mod 256), so the copy differs whatever the byte was
           COMMAND ${KILN_SH} -c "cp '${K}/signed.kiln' '${K}/tampered.kiln' && dd if='${K}/signed.kiln' bs=1 skip=2000 count=1 2>/dev/null | tr '\\000-\\377' '\\001-\\377\\000' | dd of='${K}/tampered.kiln' bs=1 seek=2000 conv=notrunc 2>/dev/null && ! cmp -s '${K}/signed.kiln' '${K}/tampered.kiln'")
  set_tests_properties(cli_sign_make_tampered PROPERTIES LABELS unit FIXTURES_REQUIRED cli_signed_module
                       FIXTURES_SETUP cli_sign_tampered)
  kiln_cli_test(run_tampered REQUIRES cli_sign_tampered RC 1
    CHECK "STDERR_HAS=tampered.kiln: refused: the signature by key id"
    ARGS run ${K}/tampered.kiln --verify-key ${K}/a.pub)
endif()

# kiln-rt-run (libkiln_rt alone) passes --verify-key through.
function(kiln_rt_sign_test name rc fixtures check)
  add_test(NAME cli_${name}
           COMMAND ${CMAKE_COMMAND} -DEXPECT_RC=${rc} "-D${check}" -P ${KILN_CLI_CHECK} --
                   $<TARGET_FILE:kiln_rt_run> ${ARGN}
           WORKING_DIRECTORY ${KILN_CLI_WORK})
  set_tests_properties(cli_${name} PROPERTIES LABELS unit TIMEOUT 120 FIXTURES_REQUIRED "${fixtures}"
                       ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endfunction()
kiln_rt_sign_test(rt_run_signed 0 cli_signed_module "STDOUT_HAS_1=runs in"
                  ${K}/signed.kiln --verify-key ${K}/a.pub)
kiln_rt_sign_test(rt_run_other_key 1 cli_signed_module "STDERR_HAS_1=refused: signed by key id"
                  ${K}/signed.kiln --verify-key ${K}/b.pub)
kiln_rt_sign_test(rt_run_unsigned 1 "cli_module;cli_sign_keys" "STDERR_HAS_1=refused: the module is not signed"
                  ${W}/tiny.kiln --verify-key ${K}/a.pub)
kiln_cli_test(info_module_model_options REQUIRES cli_module RC 2
  CHECK "STDERR_HAS=--fused, --symbolic and --dim apply to ONNX models"
  ARGS info ${W}/tiny.kiln --fused)
