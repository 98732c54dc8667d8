# The closing line of scripts/test, over every test binary's "test result:" line (cargo's own
# last line is only a doc-test binary's). `skipped` (passed with -v) is the number of tests
# that returned early and that cargo counted as passed; they are moved to skipped. A binary
# that started ("Running", "Doc-tests") but never printed its result died on its way (a
# signal, an abort) and is counted, so a crash cannot hide behind the others' counts.
/^ *(Running|Doc-tests) / { started++ }
/^test result:/ {
    finished++
    for (i = 1; i <= NF; i++) {
        if ($(i) ~ /^passed/) passed += $(i - 1)
        if ($(i) ~ /^failed/) failed += $(i - 1)
    }
}
END {
    printf "tests: %d passed, %d failed, %d skipped", passed - skipped, failed, skipped
    if (started > finished) printf ", %d test binaries ended without a result", started - finished
    printf "\n"
}
