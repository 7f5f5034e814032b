#include "stagehand/cli/cli.h"

int main(int argc, char** argv) { return stagehand::cli::Main(argc, argv); }
