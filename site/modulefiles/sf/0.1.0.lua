-- sf 0.1.0: a Slurm-native launcher for verl (Lmod modulefile).
-- scripts/install-cluster writes a copy with @SF_PREFIX@ / @SF_SITE@ replaced. Left as
-- they are, the prefix is the folder three levels above this file
-- (<prefix>/modulefiles/sf/0.1.0.lua) and the site file <prefix>/etc/site.yaml.
help([[
sf: launch verl post-training runs on Slurm.
  sf doctor          check this cluster's site file
  sf new / submit / status / logs / cancel / export / eval / metrics
Site file: $SF_SITE (set by this module).
]])
whatis("Name: sf")
whatis("Version: " .. myModuleVersion())
whatis("Description: Slurm-native launcher for verl RL post-training")
family("sf")

local prefix = "@SF_PREFIX@"
if prefix:sub(1, 1) == "@" then
  prefix = myFileName():match("^(.*)/[^/]+/[^/]+/[^/]+$")
end
local site = "@SF_SITE@"
if site:sub(1, 1) == "@" then
  site = pathJoin(prefix, "etc", "site.yaml")
end

prepend_path("PATH", pathJoin(prefix, "bin"))
setenv("SF_PREFIX", prefix)
setenv("SF_SITE", site)
