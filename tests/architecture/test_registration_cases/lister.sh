#!/bin/sh
# A stand-in for a Catch2 program's --list-test-names-only (check_test_registration.py's own test):
# a plain name, one with the characters discovery escapes, and one that discovery cuts at its ';'.
printf '%s\n' "plain name" "commas, and [brackets]" "cut; in two"
