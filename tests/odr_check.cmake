# One definition per symbol (issue 10): tests/odr_check.sh over every static
# library of the project, and its self-test, which proves the check fails on a
# function that two libraries define. Included from tests/CMakeLists.txt.
if(YOKE_BUILD_TESTS)
  # Every library target of the project, found once all directories are read
  # (coordinator/, worker/ and client/ are configured after tests/ may be).
  function(yoke_add_odr_check)
    set(libs)
    foreach(t yoke_proto yoke_grpc_proto yoke_common yoke_config yoke_jobspec yoke_security
              yoke_grpc_util yoke_http yoke_telemetry yoke_image_folder_list yoke_data_names
              yoke_engine_names yoke_engine_zoo yoke_engine_lib
              yoke_engine_cuda_lib yoke_data yoke_collective yoke_nccl yoke_pipeline yoke_ps yoke_trainer
              yoke_worker_daemon
              yoke_coordinator
              yoke_client yoke_api yoke_export yoke_onnx_proto)
      if(TARGET ${t})
        list(APPEND libs "$<TARGET_FILE:${t}>")
      endif()
    endforeach()
    add_test(NAME tests_odr_check
      COMMAND ${PROJECT_SOURCE_DIR}/tests/odr_check.sh ${libs})
    set_tests_properties(tests_odr_check PROPERTIES LABELS "unit"
      ENVIRONMENT "NM=${CMAKE_NM}")
  endfunction()
  cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL yoke_add_odr_check)

  add_test(NAME tests_odr_check_self_test
    COMMAND ${PROJECT_SOURCE_DIR}/tests/odr_check.sh --self-test)
  set_tests_properties(tests_odr_check_self_test PROPERTIES LABELS "unit"
    ENVIRONMENT "NM=${CMAKE_NM};CXX=${CMAKE_CXX_COMPILER}")
endif()
