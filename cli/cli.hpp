// SPDX-License-Identifier: Apache-2.0
// The subcommands of the tutti tool, one file each; main.cpp picks one by name. Each takes the
// arguments after its name and returns the exit status; a tutti::Error that escapes one is
// reported by main (exit 2).
#pragma once

#include <cstdio>

namespace tutti::cli {

void print_usage(std::FILE* to);  // tutti --help, and bench --help

int cmd_info(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_stats(int argc, char** argv);
int cmd_fsck(int argc, char** argv);

}  // namespace tutti::cli
