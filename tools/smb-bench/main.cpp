// smb-bench: bandwidth, latency and correctness of a Soft Memory Box buffer.
// Exit status: 0 success, 1 a libsmb error or a failed --verify, 2 a usage error.
#include "../common/tool_setup.hpp"
#include "options.hpp"
#include "report.hpp"
#include "runner.hpp"

#include <smb/error.hpp>

#include <exception>
#include <iostream>

int main(int argc, char** argv) {
  int exit_code = 0;
  auto options = smb::bench::parse_options(argc, argv, exit_code);
  if (!options) return exit_code;
  smb::tools::init_logging(options->verbose);

  smb::ClientOptions client_options;
  try {
    client_options = smb::tools::client_options(options->servers);
  } catch (const smb::Error& e) {
    std::cerr << "smb-bench: " << e.what() << '\n';
    return 2;
  }

  try {
    smb::Client client(std::move(client_options));
    auto report = smb::bench::run_benchmark(client, *options);
    if (options->json)
      smb::bench::print_json(std::cout, report);
    else
      smb::bench::print_human(std::cout, report);
    if (report.verified == false) {
      std::cerr << "smb-bench: verification of '" << report.name << "' failed";
      if (report.mismatch)
        std::cerr << ": first bad byte at offset " << report.mismatch->offset << ": expected 0x" << std::hex
                  << report.mismatch->expected << ", got 0x" << report.mismatch->got << std::dec;
      if (report.sum)
        std::cerr << ": the words' sum grew by " << report.sum->got << ", expected " << report.sum->expected;
      std::cerr << '\n';
      return 1;
    }
  } catch (const std::exception& e) {
    std::cerr << "smb-bench: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
