#pragma once
// Umbrella header of libsmb, the Soft Memory Box client library.
#include <smb/client.hpp>
#include <smb/error.hpp>
