#pragma once
/// @file
/// Umbrella header of libsmb, the Soft Memory Box client library.
#include <smb/client.hpp>
#include <smb/config.h>
#include <smb/error.hpp>
#include <smb/update_engine.hpp>
#include <smb/vector_ops.hpp>
